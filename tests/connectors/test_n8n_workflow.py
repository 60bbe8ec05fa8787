"""The example workflow (examples/n8n/workflow.json) in a real n8n 2.40, built from
n8n-nodes-opsconsole's Opsconsole node and n8n's own (Webhook, HTTP Request, If, Wait, No Op; no
Code node), installed from its `npm pack` tarball into an empty folder, against a real gunicorn and
PostgreSQL (and a real qcluster's reconciliation where the lookup decides), calling a vendor that
takes no idempotency key: json-server with our key in the shipment's body, its faults injected.
The action is the example's create-shipment (examples/n8n/integrations.yaml, applied as a file; not
consequential here but in the approval test). Each test counts the vendor's records.
Marker n8n: `make test` runs them with the rest, `make test-n8n` alone. The gunicorn and the qclusters are
tests/connectors/conftest.py's.

- the same paid invoice twice: one shipment; the second run is answered done;
- two runs racing one invoice: one acts, the other waits (in_progress, the Wait node) and is then
  answered done;
- a vendor that answers too late (the HTTP Request node's timeout): unknown, never failed;
- a 429 with Retry-After: failed (transient), the workflow waits and claims again, created once,
  both tries with the same key;
- a 400: failed (permanent), needs review: a person decides; no shipment;
- a 302 (after the vendor acted) then a 429 at its Location: unknown, never tried again (the
  example's HTTP Request does not follow redirects: a followed one's answer is not the call's);
- heartbeats keep the claim while the vendor call outlasts the lease (from the Claim node to Report);
  a claim kept past the node's limit expires to unknown, and its late report fails the execution;
- n8n SIGKILLed after the vendor created the shipment and before the report: one shipment; unknown
  after the lease, the file's lookup finds it, and a new n8n's run is answered done;
- the approval step: a consequential shipment waits for an approver (the workflow's approve
  webhook, a person's credential), then the next run creates it once;
- a signed operation.due notification starts one claim by key through the Opsconsole Trigger; a
  forged one is refused 401, a repeat of the same webhook-id starts nothing, and another action's
  notification starts nothing (the trigger's Action);
- a list of invoices (Split Out's items) is claimed in one batch request, each item as alone (a key
  twice: the first acts, the second waits; data opsconsole refuses: Person), its heartbeats kept
  while the vendor call outlasts the lease; the same list again is all done, one shipment per key;
- the package installs from its tarball into an empty folder and n8n lists its nodes; the
  workflow n8n exports holds no token or signing secret (they are in n8n's credential store).
"""

import json
import os
import threading
import time
import uuid

import httpx
import psycopg
import pytest
import yaml
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone
from opsconsole_claims import Ledger
from standardwebhooks import Webhook

from ledger.actions.notify import NAME as NOTIFY
from ledger.core import accounts, announcements
from ledger.integrations import configured
from ledger.models import Attempt, AttemptOutcome, AuditEvent, Operation, Role
from ledger.states import State
from tests import subscribed
from tests.connectors.n8n import NODE_TYPE, OWNER, TRIGGER_TYPE, N8n, packed_n8n_package, with_credentials
from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS, screenshot
from tests.faults.gunicorn import Gunicorn
from tests.faults.qcluster import PROJECT_DIR, wait_for
from tests.third_party import running_json_server

pytestmark = [pytest.mark.n8n, pytest.mark.processes, pytest.mark.django_db(transaction=True)]

EXAMPLE = PROJECT_DIR / "examples" / "n8n"
LEASE_SECONDS = 5
HTTP_TIMEOUT_MS = 8000  # the example's Create shipment node's
SIGNING_SECRET = "whsec_b3BzY29uc29sZSBuOG4gdGVzdCBzaWduaW5nIHNlY3JldA=="


@pytest.fixture(scope="module")
def tarball(tmp_path_factory):
    return packed_n8n_package(tmp_path_factory.mktemp("packed"))


@pytest.fixture(scope="module")
def n8n(tmp_path_factory, tarball):
    running = N8n(tmp_path_factory.mktemp("n8n"), tarball).start()
    yield running
    running.stop()


@pytest.fixture
def vendor(tmp_path):
    with running_json_server(tmp_path, {"shipments": []}) as server:
        yield server


def apply_example(vendor_url: str, directory, **changes) -> None:
    """The example's integrations file at this test's vendor, seen by every server process."""
    document = yaml.safe_load((EXAMPLE / "integrations.yaml").read_text())
    document["destinations"][0]["base_url"] = vendor_url
    document["http_actions"][0].update(claim_lease_seconds=LEASE_SECONDS, settle_after_seconds=1, **changes)
    path = directory / "integrations.yaml"
    path.write_text(yaml.safe_dump(document))
    call_command("integrations", "apply", str(path), stdout=open("/dev/null", "w"))
    time.sleep(configured.Loaded.REFRESH_SECONDS + 0.1)


@pytest.fixture
def shipping(workspace, gunicorn, vendor, tmp_path):
    apply_example(vendor.url, tmp_path, consequential=False)
    return gunicorn


def example_workflow(
    n8n: N8n, server_url: str, vendor_url: str, token: str, approver_token: str = "", **claim_settings
) -> str:
    """The example workflow at these URLs in this n8n, its credentials stored first: its id."""
    document = json.loads((EXAMPLE / "workflow.json").read_text())
    suffix = f"{n8n.port}-{time.monotonic_ns()}"
    document["name"] = f"{document['name']} {suffix}"
    for node in document["nodes"]:
        if node["type"] == "n8n-nodes-base.httpRequest":
            node["parameters"]["url"] = f"{vendor_url}/shipments"
        if node["type"] == "n8n-nodes-base.webhook":
            # Each workflow of a test gets its own paths: n8n serves one workflow per path.
            node["parameters"]["path"] = f"{node['parameters']['path']}-{suffix}"
            node["webhookId"] = str(uuid.uuid4())
        if node["name"] == "Claim":
            node["parameters"] |= {"leaseSeconds": LEASE_SECONDS, **claim_settings}
    ids = {
        "opsconsole (flow)": n8n.credential(f"flow {suffix}", {"url": server_url, "token": token}),
        "opsconsole (approver)": n8n.credential(
            f"approver {suffix}", {"url": server_url, "token": approver_token or token, "signingSecret": SIGNING_SECRET}
        ),
    }
    workflow_id = n8n.workflow(with_credentials(document, ids))
    n8n.paths = {"paid": f"invoice-paid-{suffix}", "approve": f"approve-shipment-{suffix}"}
    return workflow_id


@pytest.fixture
def deployed(n8n, shipping, vendor, token):
    return example_workflow(n8n, shipping.url, vendor.url, token)


def invoice(invoice_id: str) -> dict:
    return {"invoice_id": invoice_id, "customer_id": "C-7", "address": "1 Quay Street, Galway"}


def paid(n8n: N8n, data: dict, *, timeout: float = 90) -> dict:
    """Billing's webhook: POST the paid invoice; the workflow answers with its last node's item."""
    answer = httpx.post(f"{n8n.url}/webhook/{n8n.paths['paid']}", json=data, timeout=timeout)
    assert answer.status_code == 200, f"{answer.status_code} {answer.text}\n{n8n.log_tail()}"
    return answer.json()


def shipments(vendor) -> list[dict]:
    return vendor.db()["shipments"]


def posts(vendor) -> list[dict]:
    return [request for request in vendor.requests() if request["method"] == "POST"]


def test_the_same_paid_invoice_twice_creates_one_shipment(deployed, n8n, vendor):
    first = paid(n8n, invoice("INV-1"))
    second = paid(n8n, invoice("INV-1"))

    [shipment] = shipments(vendor)
    operation = Operation.objects.get()
    assert (first["status"], first["state"], first["outcome"]) == ("recorded", "succeeded", "succeeded"), first
    assert (second["status"], second["externalId"]) == ("done", str(shipment["id"])), second
    assert (operation.state, operation.external_id) == (State.SUCCEEDED, str(shipment["id"]))
    assert shipment["idempotency_key"] == operation.key
    assert [request["idempotency_key"] for request in posts(vendor)] == [operation.key], "sent as a header too"


def test_a_vendor_that_answers_too_late_is_unknown_never_failed(deployed, n8n, vendor):
    vendor.fail_next("POST /shipments", "delay_answer", ms=HTTP_TIMEOUT_MS + 4000)

    answer = paid(n8n, invoice("INV-slow"))

    assert (answer["outcome"], answer["state"]) == ("unknown", "unknown"), answer
    operation = Operation.objects.get()
    assert operation.state == State.UNKNOWN
    attempt = Attempt.objects.get(operation=operation)
    assert attempt.outcome == AttemptOutcome.AMBIGUOUS
    assert "timeout" in attempt.error_message.lower(), attempt.error_message
    assert "Quay Street" not in attempt.error_message, "never the request's payload"
    wait_for(lambda: shipments(vendor), timeout=30, message="the vendor acted, late")
    assert len(shipments(vendor)) == 1


def test_a_429_with_retry_after_is_tried_again_once_under_the_same_key(deployed, n8n, vendor):
    vendor.fail_next("POST /shipments", "status", status=429, headers={"Retry-After": "1"})

    answer = paid(n8n, invoice("INV-busy"))

    [shipment] = shipments(vendor)
    assert (answer["state"], answer["outcome"]) == ("succeeded", "succeeded"), answer
    operation = Operation.objects.get()
    assert operation.external_id == str(shipment["id"])
    assert [(request["status"], request["idempotency_key"]) for request in posts(vendor)] == [
        (429, operation.key),
        (201, operation.key),
    ]
    assert list(Attempt.objects.filter(operation=operation).order_by("id").values_list("outcome", flat=True)) == [
        AttemptOutcome.TRANSIENT,
        AttemptOutcome.OK,
    ]


def test_a_400_is_failed_for_good_and_a_person_decides(deployed, n8n, vendor):
    vendor.fail_next("POST /shipments", "status", status=400)

    answer = paid(n8n, invoice("INV-bad"))

    assert (answer["outcome"], answer["category"], answer["state"]) == ("failed", "permanent", "needs_review"), answer
    assert Operation.objects.get().state == State.NEEDS_REVIEW
    assert shipments(vendor) == []
    assert len(posts(vendor)) == 1
    again = paid(n8n, invoice("INV-bad"))
    assert again["status"] == "needs_review", "the next run is told a person decides, and does not act"
    assert len(posts(vendor)) == 1


def test_an_answer_after_a_redirect_is_unknown_and_never_tried_again(deployed, n8n, vendor):
    # A 302 (what many a vendor answers once it has created the record): n8n's HTTP Request node
    # follows redirects unless told not to, with a GET to the Location; a 429 there is not the call's
    # answer, and a retry of the call could create a second record.
    vendor.fail_next("POST /shipments", "status", status=302, headers={"Location": "/shipments/created"})
    vendor.fail_next("GET /shipments/created", "status", status=429, headers={"Retry-After": "1"})

    answer = paid(n8n, invoice("INV-redirected"))

    assert [request["path"] for request in posts(vendor)] == ["/shipments"], "never tried again"
    assert (answer["outcome"], answer["state"]) == ("unknown", "unknown"), answer
    operation = Operation.objects.get()
    assert Attempt.objects.get(operation=operation).outcome == AttemptOutcome.AMBIGUOUS


def test_heartbeats_keep_the_claim_while_the_vendor_call_outlasts_the_lease(deployed, n8n, vendor):
    vendor.fail_next("POST /shipments", "delay_answer", ms=LEASE_SECONDS * 1000 + 2000)

    answer = paid(n8n, invoice("INV-long"))

    [shipment] = shipments(vendor)
    assert (answer["state"], answer["outcome"]) == ("succeeded", "succeeded"), answer
    operation = Operation.objects.get()
    assert operation.external_id == str(shipment["id"])
    assert AuditEvent.objects.filter(operation=operation, kind="lease_expired").count() == 0


def test_two_runs_racing_one_invoice_one_acts_the_other_waits_then_reads_done(deployed, n8n, vendor):
    vendor.fail_next("POST /shipments", "delay_answer", ms=2000)  # the winner holds its claim a while
    answers: list[dict] = []
    racers = [threading.Thread(target=lambda: answers.append(paid(n8n, invoice("INV-race")))) for _ in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=120)

    [shipment] = shipments(vendor)
    assert sorted(answer["status"] for answer in answers) == ["done", "recorded"], answers
    assert len(posts(vendor)) == 1
    operation = Operation.objects.get()
    assert operation.external_id == str(shipment["id"])
    assert Attempt.objects.filter(operation=operation).count() == 1, "one try, the winner's"


def test_a_claim_kept_past_the_nodes_limit_expires_to_unknown_and_its_late_report_records_nothing(
    n8n, shipping, vendor, token
):
    example_workflow(n8n, shipping.url, vendor.url, token, heartbeatLimitSeconds=1)
    vendor.fail_next("POST /shipments", "delay_answer", ms=LEASE_SECONDS * 1000 + 2000)

    answer = httpx.post(f"{n8n.url}/webhook/{n8n.paths['paid']}", json=invoice("INV-held"), timeout=90)

    assert answer.status_code == 500, "the Report node failed the execution: a person hears of it"
    operation = Operation.objects.get()
    assert (operation.state, operation.external_id) == (State.UNKNOWN, "")
    assert AuditEvent.objects.filter(operation=operation, kind="lease_expired").count() == 1
    assert len(shipments(vendor)) == 1
    [execution] = n8n.executions(n8n.last_workflow)
    assert execution["status"] == "error", execution


def test_n8n_killed_after_the_vendor_acted_leaves_one_shipment_found_by_the_lookup(
    shipping, vendor, token, tarball, tmp_path, start_cluster
):
    crashing = N8n(tmp_path / "crashing", tarball).start()
    try:
        example_workflow(crashing, shipping.url, vendor.url, token)
        vendor.fail_next("POST /shipments", "delay_answer", ms=60_000)  # acted; the answer never arrives
        data = invoice("INV-crash")
        webhook = f"{crashing.url}/webhook/{crashing.paths['paid']}"
        caller = threading.Thread(target=post_unanswered, args=(webhook, data))
        caller.start()
        wait_for(lambda: shipments(vendor), timeout=60, message="the vendor did not create the shipment")
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

    again = N8n(tmp_path / "again", tarball).start()
    try:
        example_workflow(again, shipping.url, vendor.url, token)
        answer = paid(again, data)
    finally:
        again.stop()
    assert (answer["status"], answer["externalId"]) == ("done", str(shipment["id"])), answer
    assert len(shipments(vendor)) == 1
    assert posts(vendor) == [], "no other POST reached the vendor (the delayed one is logged when answered)"


def post_unanswered(url: str, data: dict) -> None:
    """Billing's webhook to an n8n that is killed before it answers."""
    try:
        httpx.post(url, json=data, timeout=120)
    except httpx.TransportError:
        pass


def test_a_consequential_shipment_waits_for_an_approver_then_is_created_once(
    workspace, token, n8n, gunicorn, vendor, tmp_path
):
    apply_example(vendor.url, tmp_path, consequential=True)
    approver = get_user_model().objects.create_user(username="ann")
    accounts.set_membership(workspace=workspace, user=approver, role=Role.APPROVER, actor="test")
    approver_token = accounts.issue_token(
        workspace=workspace, name="n8n approvals", actor="test", user=approver, scopes=["read", "approve"]
    )
    example_workflow(n8n, gunicorn.url, vendor.url, token, approver_token)

    waiting = paid(n8n, invoice("INV-approve"))
    assert waiting["status"] == "awaiting_approval", waiting
    assert shipments(vendor) == []

    key = Operation.objects.get().key
    approved = httpx.post(f"{n8n.url}/webhook/{n8n.paths['approve']}", json={"key": key, "reason": "ok"}, timeout=60)
    assert approved.status_code == 200, approved.text
    assert approved.json()["status"] == "approved", approved.json()

    created = paid(n8n, invoice("INV-approve"))
    [shipment] = shipments(vendor)
    assert (created["state"], Operation.objects.get().external_id) == ("succeeded", str(shipment["id"])), created


def list_workflow(n8n: N8n, server_url: str, vendor_url: str, token: str) -> tuple[str, str]:
    """A webhook taking {"invoices": [...]}, Split Out (an item per invoice), and the example's Claim,
    Create shipment and Report, each output ending in a node of its own: the workflow's id and its
    webhook's path."""
    example = {node["name"]: node for node in json.loads((EXAMPLE / "workflow.json").read_text())["nodes"]}
    suffix = f"{n8n.port}-{time.monotonic_ns()}"
    path = f"invoices-paid-{suffix}"
    create = example["Create shipment"] | {"id": str(uuid.uuid4())}
    create["parameters"] = create["parameters"] | {"url": f"{vendor_url}/shipments"}

    def node(name: str, type_: str, parameters: dict, **extra) -> dict:
        return {"id": str(uuid.uuid4()), "name": name, "type": type_, "typeVersion": 1, "position": [0, 0]} | {
            "parameters": parameters,
            **extra,
        }

    flow = {"opsconsoleApi": {"id": "", "name": "opsconsole (flow)"}}
    nodes = [
        node(
            "Invoices paid",
            "n8n-nodes-base.webhook",
            {"httpMethod": "POST", "path": path, "responseMode": "lastNode", "responseData": "allEntries"},
            typeVersion=2,
            webhookId=str(uuid.uuid4()),
        ),
        node("Split Out", "n8n-nodes-base.splitOut", {"fieldToSplitOut": "body.invoices", "options": {}}),
        example["Claim"]
        | {"id": str(uuid.uuid4())}
        | {
            "parameters": example["Claim"]["parameters"]
            | {"data": "={{ $json }}", "leaseSeconds": LEASE_SECONDS, "heartbeatLimitSeconds": 600}
        },
        create,
        example["Report"] | {"id": str(uuid.uuid4())},
        *[
            node(name, "n8n-nodes-base.noOp", {})
            for name in ("Recorded", "Already shipped", "Later", "A person decides")
        ],
    ]
    connections = {
        "Invoices paid": {"main": [[{"node": "Split Out", "type": "main", "index": 0}]]},
        "Split Out": {"main": [[{"node": "Claim", "type": "main", "index": 0}]]},
        "Claim": {
            "main": [
                [{"node": name, "type": "main", "index": 0}]
                for name in ("Create shipment", "Already shipped", "Later", "A person decides")
            ]
        },
        "Create shipment": {"main": [[{"node": "Report", "type": "main", "index": 0}]]},
        "Report": {"main": [[{"node": "Recorded", "type": "main", "index": 0}]]},
    }
    document = {
        "name": f"A list of invoices {suffix}",
        "nodes": [node | {"credentials": flow} if "credentials" in node else node for node in nodes],
        "connections": connections,
        "settings": {"executionOrder": "v1"},
    }
    credential = n8n.credential(f"flow {suffix}", {"url": server_url, "token": token})
    return n8n.workflow(with_credentials(document, {"opsconsole (flow)": credential})), path


def claims_sent(gunicorn: Gunicorn, since: int) -> list[str]:
    """The claim routes gunicorn answered after its ``since``-th access line."""
    routes = [line["route"] for line in gunicorn.access_lines()[since:]]
    return [route for route in routes if route in ("/api/v1/claims", "/api/v1/claims/batch")]


def outputs_of(run_data: dict, name: str) -> list[list[dict]]:
    """Each output's items (their json and the input item each is paired with) of the node's one run."""
    [run] = run_data[name]
    return [
        [item["json"] | {"pairedWith": item["pairedItem"]["item"]} for item in items or []]
        for items in run["data"]["main"]
    ]


def test_a_list_is_claimed_in_one_batch_each_item_as_alone_and_again_all_done(n8n, shipping, vendor, token):
    workflow_id, path = list_workflow(n8n, shipping.url, vendor.url, token)
    invalid = {"invoice_id": "INV-L3", "customer_id": "C-7"}  # no address: refused by the action's schema
    invoices = [invoice("INV-L1"), invoice("INV-L2"), invoice("INV-L1"), invalid]

    def send_list() -> dict[str, list]:
        answer = httpx.post(f"{n8n.url}/webhook/{path}", json={"invoices": invoices}, timeout=90)
        assert answer.status_code == 200, f"{answer.status_code} {answer.text}\n{n8n.log_tail()}"
        return n8n.run_data(workflow_id)

    # The first shipment's answer comes after the lease: the claims of the batch are kept alive.
    vendor.fail_next("POST /shipments", "delay_answer", ms=LEASE_SECONDS * 1000 + 2000)
    before = len(shipping.access_lines())
    first = send_list()
    assert claims_sent(shipping, before) == ["/api/v1/claims/batch"], "the list went as one batch, not a claim each"
    one, two = Operation.objects.get(payload__invoice_id="INV-L1"), Operation.objects.get(payload__invoice_id="INV-L2")
    act, done, later, person = outputs_of(first, "Claim")
    assert [(item["pairedWith"], item["key"], item["status"]) for item in act] == [
        (0, one.key, "claimed"),
        (1, two.key, "claimed"),
    ]
    assert done == []
    assert [(item["pairedWith"], item["key"], item["status"]) for item in later] == [(2, one.key, "in_progress")]
    assert [(item["pairedWith"], item["status"], item["reason"], item["httpStatus"]) for item in person] == [
        (3, "blocked", "invalid_input", 422)
    ]
    [recorded] = outputs_of(first, "Report")
    assert [(item["key"], item["state"]) for item in recorded] == [(one.key, "succeeded"), (two.key, "succeeded")]
    assert AuditEvent.objects.filter(kind="lease_expired").count() == 0

    before = len(shipping.access_lines())
    again = send_list()
    assert claims_sent(shipping, before) == ["/api/v1/claims/batch"]
    act, done, later, person = outputs_of(again, "Claim")
    assert (act, later) == ([], [])
    assert [(item["pairedWith"], item["key"], item["status"]) for item in done] == [
        (0, one.key, "done"),
        (1, two.key, "done"),
        (2, one.key, "done"),
    ]
    assert [(item["pairedWith"], item["reason"]) for item in person] == [(3, "invalid_input")]

    assert sorted((shipment["invoice_id"], shipment["idempotency_key"]) for shipment in shipments(vendor)) == [
        ("INV-L1", one.key),
        ("INV-L2", two.key),
    ], "one shipment per invoice"
    assert len(posts(vendor)) == 2
    assert set(Operation.objects.values_list("state", flat=True)) == {State.SUCCEEDED}


def test_the_tarball_installs_into_an_empty_folder_and_n8n_lists_its_nodes(n8n):
    folder = n8n.nodes_folder / "node_modules"
    installed = sorted(path.name for path in folder.iterdir() if not path.name.startswith("."))
    assert installed == ["n8n-nodes-opsconsole"], "nothing but the package: its client is bundled in it"
    listed = {node["name"]: node for node in n8n.node_types()}
    ours = sorted(name for name in listed if "opsconsole" in name)
    assert ours == sorted([NODE_TYPE, TRIGGER_TYPE])
    assert listed[NODE_TYPE]["displayName"] == "Opsconsole"
    assert listed[TRIGGER_TYPE]["webhooks"][0]["path"] == "opsconsole"


def test_the_exported_workflow_holds_no_token_or_secret(n8n, shipping, vendor, token):
    workflow_id = example_workflow(n8n, shipping.url, vendor.url, token)

    exported = json.dumps(n8n.export(workflow_id))

    for secret in (token, token.removeprefix("oc_"), SIGNING_SECRET, SIGNING_SECRET.removeprefix("whsec_")):
        assert secret not in exported
    assert '"opsconsoleApi"' in exported, "the nodes name their credential"
    with psycopg.connect(n8n.database_url) as connection:
        stored = [row[0] for row in connection.execute("SELECT data FROM credentials_entity")]
    assert stored, "the credentials are in n8n's store"
    for data in stored:
        assert token not in data, "encrypted there"
    example = (EXAMPLE / "workflow.json").read_text()
    for secret_like in ("oc_", "whsec_", "Bearer"):
        assert secret_like not in example


def due_workflow(n8n: N8n, server_url: str, vendor_url: str, token: str, *, secret: str = SIGNING_SECRET) -> str:
    """The example's act-and-report nodes behind the Opsconsole Trigger and a claim by key: the
    trigger's webhook path."""
    example = json.loads((EXAMPLE / "workflow.json").read_text())
    kept = {node["name"]: node for node in example["nodes"] if node["name"] in ("Claim", "Create shipment", "Report")}
    kept["Create shipment"]["parameters"]["url"] = f"{vendor_url}/shipments"
    kept["Claim"]["parameters"] = {
        "resource": "claim",
        "operation": "claimByKey",
        "key": "={{ $json.key }}",
        "leaseSeconds": LEASE_SECONDS,
    }
    webhook_id = str(uuid.uuid4())
    trigger = {
        "id": str(uuid.uuid4()),
        "name": "Shipment due",
        "type": TRIGGER_TYPE,
        "typeVersion": 1,
        "position": [0, 0],
        "webhookId": webhook_id,
        "parameters": {"events": ["operation.due"], "action": "create-shipment"},
        "credentials": {"opsconsoleApi": {"id": "", "name": "opsconsole (due)"}},
    }
    document = {
        "name": f"Due shipments {webhook_id}",
        "nodes": [trigger, *kept.values()],
        "connections": {
            "Shipment due": {"main": [[{"node": "Claim", "type": "main", "index": 0}]]},
            "Claim": {"main": [[{"node": "Create shipment", "type": "main", "index": 0}], [], [], []]},
            "Create shipment": {"main": [[{"node": "Report", "type": "main", "index": 0}]]},
        },
        "settings": {"executionOrder": "v1"},
    }
    credential = n8n.credential(f"due {webhook_id}", {"url": server_url, "token": token, "signingSecret": secret})
    n8n.workflow(with_credentials(document, {"opsconsole (due)": credential, "opsconsole (flow)": credential}))
    return f"{webhook_id}/opsconsole"


def notification(
    key: str,
    *,
    secret: str = SIGNING_SECRET,
    message_id: str = "demo:1:1:operation.due",
    action: str = "create-shipment",
) -> tuple:
    data = {"key": key, "action": action}
    body = json.dumps({"type": "operation.due", "timestamp": timezone.now().isoformat(), "data": data})
    now = timezone.now()
    signature = Webhook(secret).sign(message_id, now, body)
    headers = {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
    }
    return body, headers


def test_a_signed_due_notification_starts_one_claim_by_key_and_a_forged_one_none(n8n, shipping, vendor, token):
    path = due_workflow(n8n, shipping.url, vendor.url, token)
    submitted = httpx.post(
        f"{shipping.url}/api/v1/events",
        json={"action": "create-shipment", "data": invoice("INV-due")},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert submitted.status_code == 201, submitted.text
    operation = Operation.objects.get()
    assert operation.state == State.PENDING, "a caller's action waits for its caller's claim"

    forged_body, forged_headers = notification(operation.key, secret="whsec_" + "Zm9yZ2Vk" * 4)
    forged = httpx.post(f"{n8n.url}/webhook/{path}", content=forged_body, headers=forged_headers, timeout=30)
    assert forged.status_code == 401, forged.text
    assert "signature not accepted" in forged.text

    # A subscription sends the due work of every caller action: another action's (here under the
    # same key, so a run it started would claim and perform it) starts nothing.
    other_body, other_headers = notification(operation.key, action="charge-card", message_id="demo:1:0:operation.due")
    other = httpx.post(f"{n8n.url}/webhook/{path}", content=other_body, headers=other_headers, timeout=30)
    assert other.status_code == 200, other.text
    time.sleep(2)
    assert Operation.objects.get(pk=operation.pk).state == State.PENDING, "another action's notification: no claim"
    assert posts(vendor) == []
    assert "ignored" in other.text, other.text

    body, headers = notification(operation.key)
    assert httpx.post(f"{n8n.url}/webhook/{path}", content=body, headers=headers, timeout=30).status_code == 200
    wait_for(
        lambda: Operation.objects.get(pk=operation.pk).state == State.SUCCEEDED,
        timeout=60,
        describe=n8n.log_tail,
        message="the due notification's run did not claim, create and report",
    )
    again = httpx.post(f"{n8n.url}/webhook/{path}", content=body, headers=headers, timeout=30)
    assert again.status_code == 200, "a repeat is acknowledged"
    time.sleep(2)
    [shipment] = shipments(vendor)
    assert Operation.objects.get(pk=operation.pk).external_id == str(shipment["id"])
    assert len(posts(vendor)) == 1, "the forged and the repeated notification started nothing"


def test_a_real_subscription_starts_one_run_which_creates_the_shipment(
    n8n, shipping, vendor, token, workspace, start_cluster
):
    """opsconsole itself tells the workflow: the workspace subscribed to the Trigger's webhook, an
    event from elsewhere announced due by gunicorn in its own transaction, the notification signed
    with the subscription's secret and delivered by a real qcluster."""
    path = due_workflow(n8n, shipping.url, vendor.url, token, secret=subscribed.SECRET)
    subscribed.subscribe(workspace, f"{n8n.url}/webhook/{path}", events=["operation.due"])
    time.sleep(announcements.CACHE_SECONDS + 0.5)  # gunicorn's announcer reads the subscriptions again
    cluster = start_cluster("notifying", env={subscribed.SECRET_ENV: subscribed.SECRET})

    submitted = httpx.post(
        f"{shipping.url}/api/v1/events",
        json={"action": "create-shipment", "data": invoice("INV-told")},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert submitted.status_code == 201, submitted.text
    operation = Operation.objects.get(action="create-shipment")
    wait_for(
        lambda: Operation.objects.get(pk=operation.pk).state == State.SUCCEEDED,
        timeout=90,
        clusters=(cluster,),
        describe=lambda: f"{list(Operation.objects.values_list('action', 'state'))}\n{n8n.log_tail()}",
        message="the subscription's operation.due did not start the run that creates the shipment",
    )
    [shipment] = shipments(vendor)
    assert Operation.objects.get(pk=operation.pk).external_id == str(shipment["id"])
    [told] = Operation.objects.filter(action=NOTIFY)
    assert (told.payload["event"], told.payload["about"], told.state) == ("operation.due", operation.key, "succeeded")


@pytest.mark.e2e
def test_the_editor_shows_the_example_workflow_and_the_nodes_panel_lists_opsconsole(n8n, shipping, vendor, token):
    """Screenshots for people to look at: the example workflow on n8n's canvas (the claim's four named
    outputs), and the nodes panel of a new workflow searched for Opsconsole (its trigger)."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"needs Chromium at {CHROMIUM} (apt-get install chromium; .ci/run installs it)")
    workflow_id = example_workflow(n8n, shipping.url, vendor.url, token)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 900})
            page.set_default_timeout(60_000)
            page.goto(f"{n8n.url}/signin")
            page.get_by_label("Email").fill(OWNER["email"])
            page.get_by_label("Password").fill(OWNER["password"])
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url("**/home/**")
            page.goto(f"{n8n.url}/workflow/{workflow_id}")
            page.get_by_text("Create shipment").first.wait_for()
            page.wait_for_timeout(1500)
            screenshot(page, "n8n-example-workflow")
            assert page.get_by_text("Claim", exact=True).first.is_visible()
            page.goto(f"{n8n.url}/workflow/new")
            page.get_by_text("Add first step").wait_for()
            page.keyboard.press("n")  # opens the nodes panel (a new workflow's: its triggers)
            page.locator("[data-test-id=node-creator-search-bar]").fill("Opsconsole")
            page.get_by_text("Checks the signature.").wait_for()
            screenshot(page, "n8n-nodes-panel-opsconsole")
        finally:
            browser.close()
