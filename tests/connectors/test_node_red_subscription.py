"""The example flow told of due work by opsconsole itself, not by the test: a real subscription of
the workspace to the flow's due node (`POST /opsconsole/due` in Node-RED), the `operation.due` an
approval announces, reserved in the approval's transaction by gunicorn and delivered, signed with
the subscription's secret, by a real qcluster's notify-subscriber; the due node checks the signature
and the flow claims the operation by its key and creates one shipment at the vendor."""

import time

import httpx
import pytest

from ledger.actions.notify import NAME as NOTIFY
from ledger.core import accounts, announcements
from ledger.models import Operation
from ledger.states import State
from tests.connectors import node_red_example as example
from tests.connectors.node_red_example import apply_example, example_flow, invoice, paid, shipments
from tests.faults.qcluster import wait_for
from tests.subscribed import SECRET, SECRET_ENV, subscribe

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

tarball = example.tarball
node_red = example.node_red
vendor = example.vendor
shipping = example.shipping


def test_a_real_subscription_tells_the_flow_of_approved_work_and_it_creates_one_shipment(
    node_red, shipping, vendor, workspace, token, approver, start_cluster, tmp_path
):
    approver_token = accounts.issue_token(
        workspace=workspace, name="slack", actor="test", user=approver, scopes=["read", "approve"]
    )
    apply_example(vendor.url, tmp_path, consequential=True)
    subscribe(workspace, f"{node_red.url}/opsconsole/due", events=["operation.due"])
    time.sleep(announcements.CACHE_SECONDS + 0.5)  # gunicorn's announcer reads the subscriptions again
    secrets = {"oc-flows": {"token": token, "signingSecret": SECRET}, "oc-approver": {"token": approver_token}}
    flows = example_flow(shipping.url, vendor.url)
    node_red.deploy([node | {"credentials": secrets[node["id"]]} if node["id"] in secrets else node for node in flows])
    cluster = start_cluster("notifying", env={SECRET_ENV: SECRET})

    waiting = paid(node_red, invoice("INV-told"))
    assert (waiting["end"], waiting["status"]) == ("a person decides", "awaiting_approval"), waiting
    operation = Operation.objects.get(action="create-shipment")
    seen = httpx.get(
        f"{shipping.url}/api/v1/operations/{operation.key}", headers={"Authorization": f"Bearer {approver_token}"}
    ).json()
    approved = httpx.post(f"{node_red.url}/approve", json={"key": operation.key, "fingerprint": seen["fingerprint"]})
    assert approved.json()["approved"] == operation.key, approved.text

    wait_for(
        lambda: Operation.objects.get(pk=operation.pk).state == State.SUCCEEDED,
        timeout=60,
        clusters=(cluster,),
        describe=lambda: f"{list(Operation.objects.values_list('action', 'state'))}\n{node_red.log_tail()}",
        message="the subscription's operation.due did not lead the flow to create the shipment",
    )
    [shipment] = shipments(vendor)
    assert (shipment["idempotency_key"], shipment["invoice_id"]) == (operation.key, "INV-told")
    [notification] = Operation.objects.filter(action=NOTIFY)
    assert (notification.payload["event"], notification.payload["about"]) == ("operation.due", operation.key)
    assert notification.state == State.SUCCEEDED  # Node-RED's due node took it (204), signature checked
