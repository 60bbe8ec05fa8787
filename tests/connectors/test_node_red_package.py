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
- screenshots of the editor with the example flow and the claim node's help, for people to look at.
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
from tests.connectors.node_red import CREDENTIAL_SECRET, NodeRed, install, packed_node_red_package
from tests.connectors.test_node_red_flows import (  # noqa: F401  fixtures
    EXAMPLE,
    apply_example,
    example_flow,
    gunicorn,
    invoice,
    paid,
    shipments,
    shipping,
    tarball,
    vendor,
)
from tests.faults.qcluster import wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

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
        assert secret not in exported and secret not in on_disk and secret not in encrypted
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
    assert waiting["end"] == "a person decides" and waiting["status"] == "awaiting_approval", waiting
    assert shipments(vendor) == []
    operation = Operation.objects.get()
    assert operation.state == State.PENDING_APPROVAL

    seen = httpx.get(
        f"{shipping.url}/api/v1/operations/{operation.key}", headers={"Authorization": f"Bearer {approver_token}"}
    ).json()
    stale = approve(node_red, operation.key, "0" * 64)
    assert stale["refused"] == operation.key and stale["reason"] == "stale_fingerprint", stale
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


def notify(node_red: NodeRed, body: bytes, signer: Webhook) -> httpx.Response:
    """A notification as opsconsole sends one (ledger/actions/notify.py), signed by ``signer``."""
    now = datetime.now(UTC)
    webhook_id = "demo:1:operation.due:node-red"
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
    assert "act now" in text and "already done" in text and "wait, then claim again" in text
    assert Path(SHOTS, "node-red-example-flow.png").stat().st_size > 10_000


def drag(page, handle, dx: float, dy: float) -> None:
    box = handle.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + dx, y + dy, steps=10)
    page.mouse.up()
