"""The example flow (examples/node-red/flow.json) in a real Node-RED 5, built from
node-red-contrib-opsconsole's nodes and Node-RED's own (http in and response, change, delay, http
request; no function node), installed from its `npm pack` tarball, against a real gunicorn and
PostgreSQL (and a real qcluster's reconciliation where the lookup decides), calling a vendor that
takes no idempotency key: json-server with our key in the shipment's body, its faults injected.
The action is the example's create-shipment (examples/node-red/integrations.yaml, applied as a file;
not consequential here: the approval step has its own test). Each test counts the vendor's records.

- the same paid invoice twice: one shipment; the second is answered done with its id;
- two flows racing one invoice: one acts, the other waits (in_progress) and is then answered done;
- Node-RED SIGKILLed after the vendor created the shipment and before the report: one shipment; the
  operation is unknown after the lease, a claim is refused, the file's lookup finds it, and a new
  Node-RED's run of the flow is answered done;
- a vendor that answers too late (the http request node's timeout): unknown, never failed;
- a 429 with Retry-After: failed (transient), claimed again after it and created once, both tries
  with the same key;
- a 400: failed (permanent), needs review: a person decides; no shipment;
- a 302 followed by the http request node, then a 429 to the POST it sent again: unknown, not tried again;
- heartbeats keep a claim past its lease while the vendor call runs; the node's hold cap lets a
  claim whose report never comes expire (its late report is stale, the operation unknown);
- an event that came from elsewhere is found by the due node's poll, claimed by key and created once;
- a list of invoices (msg.payload an array) is claimed in one batch request: each item leaves by its
  own output (a key twice: the first acts, the second waits; data opsconsole refuses: a person; an
  item that is no object: a catch node), heartbeated while the vendor call outlasts the lease, and
  a join node gathers them again; the same list again is all done, with one shipment per invoice.
"""

import threading
import time

import httpx
import pytest
from django.utils import timezone
from opsconsole_claims import Ledger

from ledger.models import Attempt, AttemptOutcome, AuditEvent, Operation
from ledger.states import State
from tests.connectors import node_red_example as example
from tests.connectors.node_red import NodeRed
from tests.connectors.node_red_example import (
    HTTP_TIMEOUT_MS,
    LEASE_SECONDS,
    example_flow,
    invoice,
    paid,
    posts,
    shipments,
    with_credentials,
)
from tests.faults.gunicorn import Gunicorn
from tests.faults.qcluster import wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

tarball = example.tarball
node_red = example.node_red
vendor = example.vendor
shipping = example.shipping
deployed = example.deployed


def test_the_same_paid_invoice_twice_creates_one_shipment(deployed, node_red, vendor):
    first = paid(node_red, invoice("INV-1"))
    second = paid(node_red, invoice("INV-1"))

    [shipment] = shipments(vendor)
    assert first == {"end": "succeeded", "externalId": str(shipment["id"])}
    assert second == {"end": "done", "externalId": str(shipment["id"])}
    operation = Operation.objects.get()
    assert (operation.state, operation.external_id) == (State.SUCCEEDED, str(shipment["id"]))
    assert shipment["idempotency_key"] == operation.key
    assert [request["idempotency_key"] for request in posts(vendor)] == [operation.key], "sent as a header too"


def test_two_flows_racing_one_invoice_one_acts_the_other_waits_then_reads_done(deployed, node_red, vendor):
    vendor.fail_next("POST /shipments", "delay_answer", ms=2000)  # the winner holds its claim a while
    answers: list[dict] = []
    racers = [threading.Thread(target=lambda: answers.append(paid(node_red, invoice("INV-race")))) for _ in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=90)

    [shipment] = shipments(vendor)
    assert sorted(answer["end"] for answer in answers) == ["done", "succeeded"]
    assert {answer["externalId"] for answer in answers} == {str(shipment["id"])}
    assert len(posts(vendor)) == 1
    operation = Operation.objects.get()
    assert Attempt.objects.filter(operation=operation).count() == 1, "one try, the winner's"
    assert AuditEvent.objects.filter(operation=operation, kind="lease_expired").count() == 0


def test_node_red_killed_after_the_vendor_acted_leaves_one_shipment_found_by_the_lookup(
    shipping, vendor, token, tarball, tmp_path, start_cluster
):
    crashing = NodeRed(tmp_path / "crashing", tarball, http_timeout_ms=HTTP_TIMEOUT_MS).start()
    try:
        crashing.deploy(with_credentials(example_flow(shipping.url, vendor.url), token))
        vendor.fail_next("POST /shipments", "delay_answer", ms=60_000)  # acted; the answer never arrives
        data = invoice("INV-crash")
        caller = threading.Thread(target=post_unanswered, args=(f"{crashing.url}/invoice-paid", data))
        caller.start()
        wait_for(lambda: shipments(vendor), timeout=30, message="the vendor did not create the shipment")
        crashing.kill()  # after the vendor acted, before the report
        caller.join(timeout=10)
    finally:
        crashing.stop()

    operation = Operation.objects.get()
    assert operation.state == State.PROCESSING
    time.sleep(max(0.0, (operation.lease_expires_at - timezone.now()).total_seconds()) + 0.5)
    with Ledger(shipping.url, token) as ledger:
        refused = ledger.claim("create-shipment", data)
        assert (refused.http_status, refused.status, refused.should_act) == (409, "unknown", False)

    reconciler = start_cluster("reconciler")
    wait_for(
        lambda: Operation.objects.get(pk=operation.pk).state == State.SUCCEEDED,
        timeout=60,
        clusters=(reconciler,),
        describe=lambda: f"state {Operation.objects.get(pk=operation.pk).state}",
        message="reconciliation did not find the shipment by the file's lookup",
    )
    [shipment] = shipments(vendor)
    assert Operation.objects.get(pk=operation.pk).external_id == str(shipment["id"])
    assert AuditEvent.objects.filter(operation=operation, kind="lease_expired").count() == 1
    assert AuditEvent.objects.filter(operation=operation, kind="reconciled_found").count() == 1

    again = NodeRed(tmp_path / "again", tarball, http_timeout_ms=HTTP_TIMEOUT_MS).start()
    try:
        again.deploy(with_credentials(example_flow(shipping.url, vendor.url), token))
        assert paid(again, data) == {"end": "done", "externalId": str(shipment["id"])}
    finally:
        again.stop()
    assert len(shipments(vendor)) == 1
    assert posts(vendor) == [], "no other POST reached the vendor (the delayed one is logged when answered)"


def post_unanswered(url: str, data: dict) -> None:
    """Billing's webhook to a Node-RED that is killed before it answers."""
    try:
        httpx.post(url, json=data, timeout=90)
    except httpx.TransportError:
        pass


def test_a_vendor_that_answers_too_late_is_unknown_never_failed(deployed, node_red, vendor):
    vendor.fail_next("POST /shipments", "delay_answer", ms=HTTP_TIMEOUT_MS + 4000)

    answer = paid(node_red, invoice("INV-slow"))

    assert (answer["end"], answer["status"]) == ("a person decides", "unknown"), answer
    operation = Operation.objects.get()
    assert operation.state == State.UNKNOWN
    assert not Attempt.objects.filter(
        operation=operation, outcome__in=[AttemptOutcome.TRANSIENT, AttemptOutcome.PERMANENT]
    ).exists()
    attempt = Attempt.objects.get(operation=operation)
    assert attempt.outcome == AttemptOutcome.AMBIGUOUS
    # The http request node's error text ends with the vendor's URL: kept as its origin only (a
    # URL's path or query may carry a key).
    assert attempt.error_message.startswith("ETIMEDOUT"), attempt.error_message
    assert attempt.error_message.endswith(vendor.url)
    assert "/shipments" not in attempt.error_message
    wait_for(lambda: shipments(vendor), timeout=30, message="the vendor acted, late")
    assert len(shipments(vendor)) == 1


def test_a_429_with_retry_after_is_tried_again_once_under_the_same_key(deployed, node_red, vendor):
    vendor.fail_next("POST /shipments", "status", status=429, headers={"Retry-After": "1"})

    answer = paid(node_red, invoice("INV-busy"))

    [shipment] = shipments(vendor)
    assert answer == {"end": "succeeded", "externalId": str(shipment["id"])}
    operation = Operation.objects.get()
    assert [(request["status"], request["idempotency_key"]) for request in posts(vendor)] == [
        (429, operation.key),
        (201, operation.key),
    ]
    assert list(Attempt.objects.filter(operation=operation).order_by("id").values_list("outcome", flat=True)) == [
        AttemptOutcome.TRANSIENT,
        AttemptOutcome.OK,
    ]


def test_a_400_is_failed_for_good_and_a_person_decides(deployed, node_red, vendor):
    vendor.fail_next("POST /shipments", "status", status=400)

    answer = paid(node_red, invoice("INV-bad"))

    assert (answer["end"], answer["status"]) == ("a person decides", "needs_review"), answer
    assert Operation.objects.get().state == State.NEEDS_REVIEW
    assert shipments(vendor) == []
    assert len(posts(vendor)) == 1


def test_an_answer_after_a_redirect_the_http_request_node_followed_is_unknown_never_failed(deployed, node_red, vendor):
    # A 302 (what many a vendor answers once it has created the record), which the http request
    # node follows by sending the POST again to its Location, answered 429 there: that 429 is not the
    # call's answer, and a retry of the call could create a second record.
    vendor.fail_next("POST /shipments", "status", status=302, headers={"Location": "/shipments/created"})
    vendor.fail_next("POST /shipments/created", "status", status=429, headers={"Retry-After": "1"})

    answer = paid(node_red, invoice("INV-redirected"))

    assert (answer["end"], answer.get("status")) == ("a person decides", "unknown"), answer
    operation = Operation.objects.get()
    assert Attempt.objects.get(operation=operation).outcome == AttemptOutcome.AMBIGUOUS
    assert [request["path"] for request in posts(vendor)] == ["/shipments", "/shipments/created"], (
        "never tried again while the first call's fate is unknown"
    )


def test_heartbeats_keep_the_claim_while_the_vendor_call_outlasts_the_lease(deployed, node_red, vendor):
    vendor.fail_next("POST /shipments", "delay_answer", ms=LEASE_SECONDS * 1000 + 2000)

    answer = paid(node_red, invoice("INV-long"))

    [shipment] = shipments(vendor)
    assert answer == {"end": "succeeded", "externalId": str(shipment["id"])}
    operation = Operation.objects.get()
    assert AuditEvent.objects.filter(operation=operation, kind="lease_expired").count() == 0


def test_a_claim_held_past_the_nodes_cap_expires_to_unknown_and_its_late_report_records_nothing(
    deployed, node_red, vendor
):
    deployed(maxHoldSeconds=1)  # heartbeats stop after a second; the lease ends 5 s after the claim
    vendor.fail_next("POST /shipments", "delay_answer", ms=LEASE_SECONDS * 1000 + 2000)

    answer = paid(node_red, invoice("INV-held"))

    assert (answer["end"], answer["status"]) == ("a person decides", "stale_token"), answer
    operation = Operation.objects.get()
    assert (operation.state, operation.external_id) == (State.UNKNOWN, "")
    assert AuditEvent.objects.filter(operation=operation, kind="lease_expired").count() == 1
    assert len(shipments(vendor)) == 1
    assert f"held {operation.key} for 1 s without a report" in node_red.log_tail(200)


def test_an_event_from_elsewhere_is_polled_as_due_claimed_by_key_and_created_once(
    deployed, node_red, shipping, vendor, token
):
    flows = example_flow(shipping.url, vendor.url)
    for node in flows:
        if node["type"] == "opsconsole due":
            node.update(mode="poll", interval=1, action="create-shipment")
    node_red.deploy(with_credentials(flows, token))
    submitted = httpx.post(
        f"{shipping.url}/api/v1/events",
        json={"action": "create-shipment", "data": invoice("INV-elsewhere")},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert submitted.status_code == 201, submitted.text

    wait_for(
        lambda: Operation.objects.get().state == State.SUCCEEDED,
        timeout=30,
        describe=lambda: f"state {Operation.objects.get().state}\n{node_red.log_tail()}",
        message="the due node's poll did not lead to the shipment",
    )
    [shipment] = shipments(vendor)
    operation = Operation.objects.get()
    assert (shipment["invoice_id"], shipment["idempotency_key"]) == ("INV-elsewhere", operation.key)
    assert operation.external_id == str(shipment["id"])
    time.sleep(2)  # two more polls: nothing is due, nothing more is created
    assert len(posts(vendor)) == 1


def list_flow(server_url: str, vendor_url: str) -> list[dict]:
    """POST /invoices-paid with a list: the example's claim, vendor call and report, every item's end
    (and a catch node's) told by a change node, gathered again by a join node (msg.parts) into the
    answer, one entry per item in the list's order."""
    tab = "tab-list"
    ends = {
        "end-act": "succeeded",
        "end-retry": "retry",
        "end-done": "done",
        "end-wait": "wait",
        "end-person": "a person decides",
    }
    flows: list[dict] = [
        {"id": tab, "type": "tab", "label": "a list"},
        {"id": "cfg-list", "type": "opsconsole-config", "url": server_url, "timeoutMs": 10000},
        {"id": "list-in", "type": "http in", "z": tab, "url": "/invoices-paid", "method": "post", "wires": [["claim"]]},
        {
            "id": "claim",
            "type": "opsconsole claim",
            "z": tab,
            "server": "cfg-list",
            "action": "create-shipment",
            "leaseSeconds": LEASE_SECONDS,
            "maxHoldSeconds": 600,
            "keyHeader": "Idempotency-Key",
            "wires": [["our-key"], ["end-done"], ["end-wait"], ["end-person"]],
        },
        {
            "id": "our-key",
            "type": "change",
            "z": tab,
            "rules": [
                {
                    "t": "set",
                    "p": "payload",
                    "pt": "msg",
                    "to": '$merge([payload, {"idempotency_key": idempotencyKey}])',
                    "tot": "jsonata",
                }
            ],
            "wires": [["vendor"]],
        },
        {
            "id": "vendor",
            "type": "http request",
            "z": tab,
            "method": "POST",
            "ret": "obj",
            "paytoqs": "ignore",
            "url": f"{vendor_url}/shipments",
            "wires": [["report"]],
        },
        {
            "id": "report",
            "type": "opsconsole report",
            "z": tab,
            "server": "cfg-list",
            "externalId": "payload.id",
            "result": "payload",
            "wires": [["end-act"], ["end-retry"], ["end-person"]],
        },
        {"id": "catch", "type": "catch", "z": tab, "scope": ["claim"], "uncaught": False, "wires": [["end-error"]]},
        told("end-error", tab, '{"end": "error", "error": error.message}'),
        *[
            told(node_id, tab, f'{{"end": "{end}", "status": status, "key": claimKey}}')
            for node_id, end in ends.items()
        ],
        {
            "id": "join",
            "type": "join",
            "z": tab,
            "mode": "auto",
            "build": "array",
            "property": "payload",
            "propertyType": "msg",
            "accumulate": False,
            "timeout": "",
            "count": "",
            "wires": [["respond"]],
        },
        {"id": "respond", "type": "http response", "z": tab, "statusCode": "200", "headers": {}, "wires": []},
    ]
    return [node | {"x": 100, "y": 100} if "z" in node else node for node in flows]


def told(node_id: str, tab: str, expression: str) -> dict:
    """A change node: the item's end as its payload (the vendor's headers and status dropped), to the join."""
    return {
        "id": node_id,
        "type": "change",
        "z": tab,
        "rules": [
            {"t": "set", "p": "payload", "pt": "msg", "to": expression, "tot": "jsonata"},
            {"t": "delete", "p": "headers", "pt": "msg"},
            {"t": "delete", "p": "statusCode", "pt": "msg"},
        ],
        "wires": [["join"]],
    }


def claims_sent(gunicorn: Gunicorn, since: int) -> list[str]:
    """The claim routes gunicorn answered after its ``since``-th access line."""
    routes = [line["route"] for line in gunicorn.access_lines()[since:]]
    return [route for route in routes if route in ("/api/v1/claims", "/api/v1/claims/batch")]


def test_a_list_is_claimed_in_one_batch_each_item_as_alone_and_again_all_done(node_red, shipping, vendor, token):
    node_red.deploy(with_credentials(list_flow(shipping.url, vendor.url), token))
    invalid = {"invoice_id": "INV-L3", "customer_id": "C-7"}  # no address: refused by the action's schema
    invoices = [invoice("INV-L1"), invoice("INV-L2"), invoice("INV-L1"), invalid, "not an invoice"]

    def send_list() -> list[dict]:
        answer = httpx.post(f"{node_red.url}/invoices-paid", json=invoices, timeout=60)
        assert answer.status_code == 200, f"{answer.status_code} {answer.text}\n{node_red.log_tail()}"
        return answer.json()

    # The first shipment's answer comes after the lease: the claims of the batch are kept alive.
    vendor.fail_next("POST /shipments", "delay_answer", ms=LEASE_SECONDS * 1000 + 2000)
    before = len(shipping.access_lines())
    first = send_list()
    assert claims_sent(shipping, before) == ["/api/v1/claims/batch"], "the list went as one batch, not a claim each"
    one, two = Operation.objects.get(payload__invoice_id="INV-L1"), Operation.objects.get(payload__invoice_id="INV-L2")
    assert AuditEvent.objects.filter(kind="lease_expired").count() == 0
    assert first == [
        {"end": "succeeded", "status": "succeeded", "key": one.key},
        {"end": "succeeded", "status": "succeeded", "key": two.key},
        {"end": "wait", "status": "in_progress", "key": one.key},
        {"end": "a person decides", "status": "blocked"},
        {"end": "error", "error": "Error: msg.payload must be the event's data, an object"},
    ], first

    before = len(shipping.access_lines())
    again = send_list()
    assert claims_sent(shipping, before) == ["/api/v1/claims/batch"]
    assert [(answer["end"], answer.get("key")) for answer in again] == [
        ("done", one.key),
        ("done", two.key),
        ("done", one.key),
        ("a person decides", None),
        ("error", None),
    ], again

    assert sorted((shipment["invoice_id"], shipment["idempotency_key"]) for shipment in shipments(vendor)) == [
        ("INV-L1", one.key),
        ("INV-L2", two.key),
    ], "one shipment per invoice"
    assert len(posts(vendor)) == 2
    assert set(Operation.objects.values_list("state", flat=True)) == {State.SUCCEEDED}
