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
- heartbeats keep a claim past its lease while the vendor call runs; the node's hold cap lets a
  claim whose report never comes expire (its late report is stale, the operation unknown).
"""

import json
import threading
from io import StringIO
import time
from pathlib import Path

import httpx
import pytest
import yaml
from django.core.management import call_command
from django.utils import timezone
from opsconsole_claims import Ledger

from ledger.integrations import configured
from ledger.models import Attempt, AttemptOutcome, AuditEvent, Operation
from ledger.states import State
from tests.connectors.node_red import NodeRed, packed_node_red_package
from tests.faults.gunicorn import running_gunicorn
from tests.faults.qcluster import PROJECT_DIR, cluster_pool, wait_for
from tests.third_party import running_json_server

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

EXAMPLE = PROJECT_DIR / "examples" / "node-red"
LEASE_SECONDS = 5
HTTP_TIMEOUT_MS = 8000  # the http request node's (settings.httpRequestTimeout)


@pytest.fixture(scope="module")
def gunicorn(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        with running_gunicorn(tmp_path_factory.mktemp("gunicorn")) as running:
            yield running


@pytest.fixture(scope="module")
def tarball(tmp_path_factory):
    return packed_node_red_package(tmp_path_factory.mktemp("packed"))


@pytest.fixture(scope="module")
def node_red(tmp_path_factory, tarball):
    running = NodeRed(tmp_path_factory.mktemp("node-red"), tarball, http_timeout_ms=HTTP_TIMEOUT_MS).start()
    yield running
    running.stop()


@pytest.fixture
def start_cluster(transactional_db, tmp_path):
    with cluster_pool(tmp_path) as start:
        yield start


@pytest.fixture
def vendor(tmp_path):
    with running_json_server(tmp_path, {"shipments": []}) as server:
        yield server


@pytest.fixture
def shipping(workspace, token, gunicorn, vendor, tmp_path):
    """The example's integrations file applied at this test's vendor (create-shipment without its
    approval step, a short lease), and seen by every server process."""
    apply_example(vendor.url, tmp_path, consequential=False)
    return gunicorn


def apply_example(vendor_url: str, directory: Path, **changes) -> None:
    """examples/node-red/integrations.yaml at ``vendor_url``, with a short lease and ``changes`` to
    the action, applied with `manage.py integrations apply` and seen by every server process."""
    document = yaml.safe_load((EXAMPLE / "integrations.yaml").read_text())
    document["destinations"][0]["base_url"] = vendor_url
    [action] = document["http_actions"]
    action.update(claim_lease_seconds=LEASE_SECONDS, settle_after_seconds=1, **changes)
    path = directory / "integrations.yaml"
    path.write_text(yaml.safe_dump(document))
    call_command("integrations", "apply", str(path), stdout=StringIO())
    time.sleep(configured.Loaded.REFRESH_SECONDS + 0.1)


def example_flow(server_url: str, vendor_url: str, **claim_settings) -> list[dict]:
    """The example flow at these URLs (the file's are make demo's and a vendor on :3000)."""
    flows = json.loads((EXAMPLE / "flow.json").read_text())
    for node in flows:
        if node["type"] == "opsconsole-config":
            node["url"] = server_url
        if node["type"] == "http request":
            node["url"] = f"{vendor_url}/shipments"
        if node["type"] == "opsconsole claim":
            node.update(leaseSeconds=LEASE_SECONDS, **claim_settings)
    return flows


def with_credentials(flows: list[dict], token: str) -> list[dict]:
    """What the editor sends on deploy: the config nodes' credentials, once."""
    return [node | {"credentials": {"token": token}} if node["type"] == "opsconsole-config" else node for node in flows]


@pytest.fixture
def deployed(node_red, shipping, vendor, token):
    def deploy(**claim_settings):
        node_red.deploy(with_credentials(example_flow(shipping.url, vendor.url, **claim_settings), token))
        return node_red

    deploy()
    return deploy


def invoice(invoice_id: str) -> dict:
    return {"invoice_id": invoice_id, "customer_id": "C-7", "address": "1 Quay Street, Galway"}


def paid(node_red: NodeRed, data: dict, *, timeout: float = 60) -> dict:
    """Billing's webhook: POST the paid invoice to the flow; the flow's answer says how it ended."""
    answer = httpx.post(f"{node_red.url}/invoice-paid", json=data, timeout=timeout)
    assert answer.status_code == 200, f"{answer.status_code} {answer.text}\n{node_red.log_tail()}"
    return answer.json()


def shipments(vendor) -> list[dict]:
    return vendor.db()["shipments"]


def posts(vendor) -> list[dict]:
    return [request for request in vendor.requests() if request["method"] == "POST"]


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

    assert answer["end"] == "a person decides" and answer["status"] == "unknown", answer
    operation = Operation.objects.get()
    assert operation.state == State.UNKNOWN
    assert not Attempt.objects.filter(operation=operation, outcome__in=[AttemptOutcome.TRANSIENT, AttemptOutcome.PERMANENT]).exists()
    assert Attempt.objects.get(operation=operation).outcome == AttemptOutcome.AMBIGUOUS
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

    assert answer["end"] == "a person decides" and answer["status"] == "needs_review", answer
    assert Operation.objects.get().state == State.NEEDS_REVIEW
    assert shipments(vendor) == []
    assert len(posts(vendor)) == 1


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

    assert answer["end"] == "a person decides" and answer["status"] == "stale_token", answer
    operation = Operation.objects.get()
    assert (operation.state, operation.external_id) == (State.UNKNOWN, "")
    assert AuditEvent.objects.filter(operation=operation, kind="lease_expired").count() == 1
    assert len(shipments(vendor)) == 1
    assert "held " in node_red.log_tail(200) and "without a report" in node_red.log_tail(200)
