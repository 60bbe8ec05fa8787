"""node-red-contrib-opsconsole as a user meets it, in a real Node-RED 5:

- its `npm pack` tarball installs into an empty folder with nothing else (the client bundled), and
  Node-RED's palette (the admin API's `/nodes`) lists its six nodes, loaded, with no error;
- the API token and the notifications' signing secret live only in Node-RED's credential store:
  neither the exported flows (GET /flows), nor the flows file, nor the encrypted credentials file
  holds them, and a restarted Node-RED still has them (decrypted with its credentialSecret);
- the example's approval step: create-shipment is consequential, so the paid invoice's claim
  waits for a person; an approver approves through the flow's operate node (with the fingerprint
  they saw), opsconsole's signed operation.due notification reaches the due node (a forged one is
  refused 401, a repeat dropped), and the flow claims it by key and creates one shipment;
- screenshots of the editor with the example flow and the claim node's help, for people to look at;
- refusals and bad input leave by the output, or the error for a catch node, that says so (a bad
  token, opsconsole unreachable, a bad URL, no action, a payload not an object, a report without a
  claim), and the event and operate nodes submit, refuse, cancel, pause and resume.
"""

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from ledger.core import accounts
from ledger.models import Operation
from ledger.states import State
from tests.connectors import node_red_example as example
from tests.connectors.node_red import CREDENTIAL_SECRET, NodeRed, install, packed_node_red_package
from tests.connectors.node_red_example import EXAMPLE, apply_example, example_flow, invoice, paid, shipments
from tests.faults.qcluster import wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

tarball = example.tarball
vendor = example.vendor
shipping = example.shipping

NODE_TYPES = {
    "opsconsole-config",
    "opsconsole claim",
    "opsconsole report",
    "opsconsole event",
    "opsconsole due",
    "opsconsole operate",
}
SIGNING_SECRET = "whsec_" + "bm9kZS1yZWQgbm90aWZpY2F0aW9ucyBzaWduaW5nIHNlY3JldA=="
SHOTS = os.environ.get("E2E_SHOTS", "/tmp/e2e-shots")


@pytest.fixture(scope="module")
def node_red(tmp_path_factory, tarball):
    running = NodeRed(tmp_path_factory.mktemp("node-red"), tarball).start()
    yield running
    running.stop()


def credentials(flows: list[dict], flow_token: str, approver_token: str = "") -> list[dict]:
    secrets = {
        "oc-flows": {"token": flow_token, "signingSecret": SIGNING_SECRET},
        "oc-approver": {"token": approver_token or flow_token},
    }
    return [node | {"credentials": secrets[node["id"]]} if node["id"] in secrets else node for node in flows]


def test_the_packed_tarball_installs_into_an_empty_folder_and_the_palette_lists_the_nodes(tmp_path):
    tarball = packed_node_red_package(tmp_path / "packed")
    empty = tmp_path / "empty"
    installed = install(tarball, empty)
    assert installed.returncode == 0, installed.stderr
    package = empty / "node_modules" / "node-red-contrib-opsconsole"
    assert (package / "node_modules" / "opsconsole-client" / "dist" / "cjs" / "index.js").exists(), "bundled"
    assert not (package / "node_modules" / "opsconsole-client").is_symlink()

    node_red = NodeRed(tmp_path / "palette", tarball).start()
    try:
        palette = node_red.admin("GET", "/nodes", headers={"Accept": "application/json"}).json()
    finally:
        node_red.stop()
    ours = [node_set for node_set in palette if node_set["module"] == "node-red-contrib-opsconsole"]
    assert {node_type for node_set in ours for node_type in node_set["types"]} == NODE_TYPES
    print(ours[0])
    assert all(node_set["enabled"] and not node_set.get("err") for node_set in ours), ours
    assert {node_set["version"] for node_set in ours} == {"0.1.0"}


def test_the_token_and_the_signing_secret_are_only_in_the_credential_store(node_red, token, tmp_path):
    node_red.deploy(credentials(example_flow("http://127.0.0.1:8000", "http://127.0.0.1:3000"), token))

    exported = node_red.admin("GET", "/flows").text
    on_disk = node_red.flows_path.read_text()
    encrypted = node_red.credentials_path.read_text()
    for secret in (token, SIGNING_SECRET, SIGNING_SECRET.removeprefix("whsec_")):
        assert secret not in exported
        assert secret not in on_disk
        assert secret not in encrypted
    assert '"type": "opsconsole-config"' in on_disk or '"type":"opsconsole-config"' in on_disk
    assert "$" in json.loads(encrypted), "encrypted with the credentialSecret"
    assert CREDENTIAL_SECRET not in exported

    # The editor is told only that they are set, and a restart decrypts them again.
    node_red.stop()
    node_red.start()
    shown = node_red.admin("GET", "/credentials/opsconsole-config/oc-flows").json()
    assert shown == {"has_token": True, "has_signingSecret": True}


def test_the_approval_step_then_the_due_notification_creates_one_shipment(
    node_red, shipping, vendor, workspace, token, approver, tmp_path
):
    approver_token = accounts.issue_token(
        workspace=workspace, name="slack", actor="test", user=approver, scopes=["read", "approve"]
    )
    apply_example(vendor.url, tmp_path, consequential=True)  # as the example's file declares it
    node_red.deploy(credentials(example_flow(shipping.url, vendor.url), token, approver_token))
    data = invoice("INV-approve")

    waiting = paid(node_red, data)
    assert (waiting["end"], waiting["status"]) == ("a person decides", "awaiting_approval"), waiting
    assert shipments(vendor) == []
    operation = Operation.objects.get()
    assert operation.state == State.PENDING_APPROVAL

    seen = httpx.get(
        f"{shipping.url}/api/v1/operations/{operation.key}", headers={"Authorization": f"Bearer {approver_token}"}
    ).json()
    stale = approve(node_red, operation.key, "0" * 64)
    assert (stale["refused"], stale["reason"]) == (operation.key, "stale_fingerprint"), stale
    approved = approve(node_red, operation.key, seen["fingerprint"])
    assert approved["approved"] == operation.key, approved
    assert Operation.objects.get().state == State.PENDING

    body = json.dumps(
        {
            "type": "operation.due",
            "timestamp": datetime.now(UTC).isoformat(),
            "data": {"workspace": "demo", "key": operation.key, "action": "create-shipment", "state": "pending"},
        },
        separators=(",", ":"),
    ).encode()
    forged = notify(node_red, body, Webhook("whsec_" + "Zm9yZ2VkIGZvcmdlZCBmb3JnZWQgZm9yZ2Vk"))
    assert forged.status_code == 401
    time.sleep(1)
    assert Operation.objects.get().state == State.PENDING, "a forged notification claims nothing"
    # The subscription sends every caller action's due work: the flow's due node (Action
    # create-shipment) drops another action's, so its claim node never performs it.
    other = json.loads(body) | {"data": json.loads(body)["data"] | {"action": "charge-customer"}}
    other_body = json.dumps(other, separators=(",", ":")).encode()
    assert notify(node_red, other_body, Webhook(SIGNING_SECRET), "demo:2:operation.due:node-red").status_code == 204
    time.sleep(1)
    assert Operation.objects.get().state == State.PENDING, "another action's notification claims nothing"

    assert notify(node_red, body, Webhook(SIGNING_SECRET)).status_code == 204
    wait_for(
        lambda: Operation.objects.get().state == State.SUCCEEDED,
        timeout=30,
        describe=lambda: f"state {Operation.objects.get().state}\n{node_red.log_tail()}",
        message="the due node's claim by key did not create the shipment",
    )
    assert notify(node_red, body, Webhook(SIGNING_SECRET)).status_code == 204, "a repeat is taken and dropped"
    time.sleep(1)
    [shipment] = shipments(vendor)
    assert (shipment["idempotency_key"], shipment["invoice_id"]) == (operation.key, "INV-approve")
    assert Operation.objects.get().external_id == str(shipment["id"])


def approve(node_red: NodeRed, key: str, fingerprint: str) -> dict:
    answer = httpx.post(f"{node_red.url}/approve", json={"key": key, "fingerprint": fingerprint}, timeout=30)
    assert answer.status_code == 200, f"{answer.status_code} {answer.text}\n{node_red.log_tail()}"
    return answer.json()


def notify(
    node_red: NodeRed, body: bytes, signer: Webhook, webhook_id: str = "demo:1:operation.due:node-red"
) -> httpx.Response:
    """A notification as opsconsole sends one (ledger/actions/notify.py), signed by ``signer``."""
    now = datetime.now(UTC)
    headers = {
        "Content-Type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signer.sign(webhook_id, now, body),
    }
    return httpx.post(f"{node_red.url}/opsconsole/due", content=body, headers=headers, timeout=30)


def test_screenshots_of_the_editor_with_the_example_flow_and_the_claim_nodes_help(node_red, token, tmp_path):
    chromium = "/usr/bin/chromium"
    if not os.path.exists(chromium):
        pytest.skip(f"needs Chromium at {chromium} (apt-get install chromium; .ci/run installs it)")
    from playwright.sync_api import sync_playwright

    from tests.e2e.conftest import CHROMIUM_ARGS

    node_red.deploy(credentials(json.loads((EXAMPLE / "flow.json").read_text()), token))
    os.makedirs(SHOTS, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1920, "height": 1200})
            page.set_default_timeout(30_000)
            page.goto(f"{node_red.url}/#flow/tab-shipments")
            page.locator("#red-ui-workspace-chart .red-ui-flow-node").first.wait_for()
            page.wait_for_timeout(500)
            page.screenshot(path=os.path.join(SHOTS, "node-red-example-flow.png"))
            # Select the claim node and show its help (as a click on it and the Help tab do), with
            # room for it: the debug panel dragged down, the sidebar wider, the help's index shorter.
            page.evaluate("() => { RED.view.select('claim'); RED.sidebar.help.show('opsconsole claim'); }")
            drag(page, page.locator("#red-ui-sidebar .red-ui-sidebar-section-separator"), 0, 800)
            drag(page, page.locator("#red-ui-sidebar-separator"), -260, 0)
            drag(page, page.locator(".red-ui-sidebar-help-stack .red-ui-panels-separator"), 0, -130)
            page.locator("a.red-ui-help-info-header", has_text="Inputs").click()  # folded: the outputs show
            help_panel = page.locator(".red-ui-sidebar-help-stack .red-ui-help").first
            help_panel.get_by_text("a person must decide").first.wait_for()
            page.wait_for_timeout(500)
            page.screenshot(path=os.path.join(SHOTS, "node-red-claim-help.png"))
            text = help_panel.inner_text()
        finally:
            browser.close()
    for output in ("act now", "already done", "wait, then claim again", "a person must decide"):
        assert output in text
    assert Path(SHOTS, "node-red-example-flow.png").stat().st_size > 10_000


def drag(page, handle, dx: float, dy: float) -> None:
    box = handle.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + dx, y + dy, steps=10)
    page.mouse.up()


def refusals_flow(server_url: str, unreachable_url: str) -> list[dict]:
    """POST /try/<case>: a claim node whose every output, and a catch node, answer which it took."""
    tab = "tab-refusals"
    flows: list[dict] = [
        {"id": tab, "type": "tab", "label": "refusals"},
        {"id": "cfg-bad-token", "type": "opsconsole-config", "url": server_url, "timeoutMs": 5000},
        {"id": "cfg-unreachable", "type": "opsconsole-config", "url": unreachable_url, "timeoutMs": 5000},
        {"id": "cfg-no-url", "type": "opsconsole-config", "url": "ftp://nowhere", "timeoutMs": 5000},
        {"id": "respond", "type": "http response", "z": tab, "statusCode": "200", "headers": {}, "wires": []},
        {"id": "catch", "type": "catch", "z": tab, "scope": None, "uncaught": False, "wires": [["caught"]]},
        answer("caught", tab, '{"output": "error", "error": error.message}'),
    ]
    for case, config, action in (
        ("bad-token", "cfg-bad-token", "create-shipment"),
        ("unreachable", "cfg-unreachable", "create-shipment"),
        ("no-url", "cfg-no-url", "create-shipment"),
        ("no-action", "cfg-bad-token", ""),
    ):
        outputs = [f"{case}-out{index}" for index in range(1, 5)]
        flows += [
            {
                "id": f"{case}-in",
                "type": "http in",
                "z": tab,
                "url": f"/try/{case}",
                "method": "post",
                "wires": [[f"{case}-claim"]],
            },
            {
                "id": f"{case}-claim",
                "type": "opsconsole claim",
                "z": tab,
                "server": config,
                "action": action,
                "leaseSeconds": 5,
                "maxHoldSeconds": 60,
                "keyHeader": "",
                "wires": [[out] for out in outputs],
            },
            *[answer(out, tab, f'{{"output": {index}, "status": status}}') for index, out in enumerate(outputs, 1)],
        ]
    flows += [
        {"id": "report-in", "type": "http in", "z": tab, "url": "/try/report", "method": "post", "wires": [["report"]]},
        {
            "id": "report",
            "type": "opsconsole report",
            "z": tab,
            "server": "cfg-bad-token",
            "externalId": "payload.id",
            "result": "",
            "wires": [["caught"], ["caught"], ["caught"]],
        },
    ]
    # Every flow node has a place on the canvas (a node without one is taken for a config node).
    return [node | {"x": 100, "y": 100} if "z" in node else node for node in flows]


def answer(node_id: str, tab: str, expression: str) -> dict:
    return {
        "id": node_id,
        "type": "change",
        "z": tab,
        "wires": [["respond"]],
        "rules": [{"t": "set", "p": "payload", "pt": "msg", "to": expression, "tot": "jsonata"}],
    }


def test_refusals_and_bad_input_leave_by_the_output_that_says_so(node_red, token, gunicorn, workspace):
    from tests.faults.gunicorn import free_port

    flows = refusals_flow(gunicorn.url, f"http://127.0.0.1:{free_port()}")
    credentials = {"cfg-bad-token": "oc_not-a-token", "cfg-unreachable": token, "cfg-no-url": token}
    node_red.deploy(
        [
            node | {"credentials": {"token": credentials[node["id"]]}} if node["id"] in credentials else node
            for node in flows
        ]
    )

    def attempt(case: str, payload) -> dict:
        answer = httpx.post(f"{node_red.url}/try/{case}", json=payload, timeout=60)
        assert answer.status_code == 200, f"{answer.status_code} {answer.text}\n{node_red.log_tail()}"
        return answer.json()

    data = invoice("INV-refused")
    assert attempt("bad-token", data) == {"output": 4, "status": "unauthorized"}, "a person must fix the credential"
    assert attempt("unreachable", data) == {"output": 3, "status": "unavailable"}, "never act; claim again later"
    # Node-RED hands a node's error to a catch node as its text ("Error: ...").
    assert attempt("no-url", data) == {
        "output": "error",
        "error": 'Error: opsconsole-config "cfg-no-url": the URL must start with http:// or https://',
    }
    assert attempt("no-action", data)["error"].startswith("Error: no action: set it in the node")
    # A text (an array is a list of events, claimed in a batch: test_node_red_flows.py).
    not_an_object = httpx.post(
        f"{node_red.url}/try/bad-token", content="not an object", headers={"Content-Type": "text/plain"}, timeout=60
    )
    assert not_an_object.json() == {
        "output": "error",
        "error": "Error: msg.payload must be the event's data, an object",
    }
    no_claim = attempt("report", {"id": 7})
    assert no_claim["error"] == "Error: no msg.claim: put this node after an opsconsole claim node's 'act now' output"
    assert token not in node_red.log_tail(400)


def management_flow(server_url: str) -> list[dict]:
    """POST /event (the event node) and POST /operate (the operate node, the operation from
    msg.payload.operation): each answers which output it left by, and what it carried."""
    tab = "tab-management"
    return [
        {"id": tab, "type": "tab", "label": "management"},
        {"id": "cfg-machine", "type": "opsconsole-config", "url": server_url, "timeoutMs": 5000},
        {"id": "respond", "type": "http response", "z": tab, "statusCode": "200", "headers": {}, "wires": []},
        {"id": "event-in", "type": "http in", "z": tab, "url": "/event", "method": "post", "wires": [["event"]]},
        {
            "id": "event",
            "type": "opsconsole event",
            "z": tab,
            "server": "cfg-machine",
            "action": "create-shipment",
            "wires": [["event-1"], ["event-2"]],
        },
        answer("event-1", tab, '{"output": 1, "status": status, "key": key}'),
        answer("event-2", tab, '{"output": 2, "status": status, "reason": reason}'),
        {"id": "operate-in", "type": "http in", "z": tab, "url": "/operate", "method": "post", "wires": [["which"]]},
        {
            "id": "which",
            "type": "change",
            "z": tab,
            "wires": [["operate"]],
            "rules": [{"t": "set", "p": "operation", "pt": "msg", "to": "payload.operation", "tot": "msg"}],
        },
        {
            "id": "operate",
            "type": "opsconsole operate",
            "z": tab,
            "server": "cfg-machine",
            "operation": "",
            "wires": [["operate-1"], ["operate-2"]],
        },
        answer("operate-1", tab, '{"output": 1, "status": status, "answer": payload}'),
        answer("operate-2", tab, '{"output": 2, "status": status, "reason": reason}'),
        {"id": "catch", "type": "catch", "z": tab, "scope": None, "uncaught": False, "wires": [["caught"]]},
        answer("caught", tab, '{"output": "error", "error": error.message}'),
    ]


def test_the_event_and_operate_nodes_submit_cancel_pause_and_resume(node_red, shipping, workspace):
    machine = accounts.issue_token(
        workspace=workspace, name="node-red", actor="test", scopes=["events", "claims", "read", "operate"]
    )
    flows = [node | {"x": 100, "y": 100} if "z" in node else node for node in management_flow(shipping.url)]
    node_red.deploy(
        [node | {"credentials": {"token": machine}} if node["id"] == "cfg-machine" else node for node in flows]
    )

    def post(path: str, body: dict) -> dict:
        answer = httpx.post(f"{node_red.url}{path}", json=body, timeout=60)
        assert answer.status_code == 200, f"{answer.status_code} {answer.text}\n{node_red.log_tail()}"
        return answer.json()

    accepted = post("/event", invoice("INV-event"))
    assert (accepted["output"], accepted["status"]) == (1, "accepted"), accepted
    key = accepted["key"]
    assert Operation.objects.get(key=key).state == State.PENDING, "a caller action's event waits for its claim"
    refused = post("/event", {"invoice_id": "INV-bad"})
    assert (refused["output"], refused["status"], refused["reason"]) == (2, "blocked", "invalid_input"), refused
    conflict = post("/event", invoice("INV-event") | {"address": "another street"})
    assert (conflict["output"], conflict["reason"]) == (2, "payload_conflict"), conflict

    got = post("/operate", {"operation": "get", "key": key})
    assert (got["output"], got["answer"]["key"], got["answer"]["state"]) == (1, key, "pending"), got
    assert post("/operate", {"operation": "cancel", "key": key}) == {
        "output": "error",
        "error": "Error: msg.reason (or msg.payload.reason) is required",
    }
    cancelled = post("/operate", {"operation": "cancel", "key": key, "reason": "sent by mistake"})
    assert cancelled["output"] == 1, cancelled
    assert Operation.objects.get(key=key).state == State.CANCELLED
    again = post("/operate", {"operation": "cancel", "key": key, "reason": "twice"})
    assert again["output"] == 2, "cancelled already: refused, by the second output"

    paused = post(
        "/operate", {"operation": "pause", "scope": "action", "action": "create-shipment", "reason": "vendor incident"}
    )
    assert paused["output"] == 1, paused
    [pause] = paused["answer"]["pauses"]
    resumed = post("/operate", {"operation": "resume", "pauseId": pause["id"]})
    assert (resumed["output"], resumed["status"]) == (1, "resumed"), resumed
    unknown = post("/operate", {"operation": "explode", "key": key})
    assert unknown["error"].startswith('Error: unknown operation "explode"')


def due_endpoint_flow() -> list[dict]:
    """The due node's endpoint beside an http in node of the user's own (POST /echo answers its body)."""
    tab = "tab-due-endpoint"
    return [
        {"id": tab, "type": "tab", "label": "due endpoint"},
        {"id": "cfg-due", "type": "opsconsole-config", "url": "http://127.0.0.1:9", "timeoutMs": 1000},
        {
            "id": "due-in",
            "type": "opsconsole due",
            "z": tab,
            "server": "cfg-due",
            "mode": "webhook",
            "path": "/opsconsole/due",
            "action": "",
            "interval": 60,
            "x": 100,
            "y": 100,
            "wires": [[]],
        },
        {
            "id": "echo-in",
            "type": "http in",
            "z": tab,
            "url": "/echo",
            "method": "post",
            "x": 100,
            "y": 200,
            "wires": [["echo-out"]],
        },
        {
            "id": "echo-out",
            "type": "http response",
            "z": tab,
            "statusCode": "",
            "headers": {},
            "x": 300,
            "y": 200,
            "wires": [],
        },
    ]


def test_the_due_endpoint_answers_every_spelling_of_its_path_and_refuses_a_body_too_large(node_red):
    node_red.deploy(
        [
            node | {"credentials": {"token": "oc_t", "signingSecret": SIGNING_SECRET}}
            if node["id"] == "cfg-due"
            else node
            for node in due_endpoint_flow()
        ]
    )
    unsigned = b'{"type":"operation.due","data":{"key":"k"}}'
    # Express routes ignore case: every spelling that reaches the handler has its raw body kept
    # (before, the editor's JSON parser read it first and the handler waited for a body forever).
    for path in ("/opsconsole/due", "/Opsconsole/DUE", "/opsconsole/due/", "/opsconsole/due?x=1"):
        answer = httpx.post(
            f"{node_red.url}{path}", content=unsigned, headers={"Content-Type": "application/json"}, timeout=10
        )
        assert answer.status_code == 401, (path, answer.status_code, answer.text)

    # A notification is a few hundred bytes: a body of 10 MB is refused, not read into memory.
    too_large = b"{" + b" " * (10 * 1024 * 1024) + b"}"
    answer = httpx.post(
        f"{node_red.url}/opsconsole/due", content=too_large, headers={"Content-Type": "application/json"}, timeout=30
    )
    assert answer.status_code == 413, (answer.status_code, answer.text[:300])

    # The user's own http in routes and the admin API still read their bodies.
    echoed = httpx.post(f"{node_red.url}/echo", json={"a": 1}, timeout=10)
    assert (echoed.status_code, echoed.json()) == (200, {"a": 1})
    assert node_red.admin("GET", "/flows").status_code == 200
