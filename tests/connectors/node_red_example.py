"""The example (examples/node-red/) as the Node-RED tests run it: a module's gunicorn and packed
package, a vendor per test (json-server, `shipments`, no idempotency), the example's integrations
file applied at it, and the example flow pointed at both (gunicorn and start_cluster: the folder's
conftest.py). Test modules take these fixtures by name (``vendor = example.vendor``)."""

import json
import time
from io import StringIO
from pathlib import Path

import httpx
import pytest
import yaml
from django.core.management import call_command

from ledger.integrations import configured
from tests.connectors.node_red import NodeRed, packed_node_red_package
from tests.faults.qcluster import PROJECT_DIR
from tests.third_party import running_json_server

EXAMPLE = PROJECT_DIR / "examples" / "node-red"
LEASE_SECONDS = 5
HTTP_TIMEOUT_MS = 8000  # the http request node's (settings.httpRequestTimeout)


@pytest.fixture(scope="module")
def tarball(tmp_path_factory):
    return packed_node_red_package(tmp_path_factory.mktemp("packed"))


@pytest.fixture(scope="module")
def node_red(tmp_path_factory, tarball):
    running = NodeRed(tmp_path_factory.mktemp("node-red"), tarball, http_timeout_ms=HTTP_TIMEOUT_MS).start()
    yield running
    running.stop()


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
