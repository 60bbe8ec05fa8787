"""docs/integrations.md's complete example is true: its one file applies (destinations, HTTP actions,
sources and a subscription), applying it again changes nothing, each HTTP action is registered with the destination
it names, and each source takes a delivery signed as its sender signs (the Standard Webhooks one by
opsconsole.send_webhook's own signing), ignores what no rule maps, and answers a redelivery as a
duplicate."""

import base64
import hashlib
import hmac
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from ledger.actions import get_action
from ledger.core import accounts
from ledger.integrations import file as integrations_file
from ledger.models import Delivery, Operation, Source
from opsconsole.send_webhook import signed_headers

DOC = Path(__file__).resolve().parent.parent / "docs" / "integrations.md"
SECRETS = {
    "OPSCONSOLE_SOURCE_ACME_STRIPE": "whsec_stripe-test-secret",
    "OPSCONSOLE_SOURCE_ACME_GITHUB": "a-random-github-secret",
    "OPSCONSOLE_SOURCE_ACME_BILLING": "whsec_" + base64.b64encode(b"a billing secret of 32 bytes....").decode(),
}


@pytest.fixture
def example(db, monkeypatch):
    """The doc's file (its one yaml block), applied in a workspace acme (owner ops), the secrets in
    the environment."""
    [block] = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)
    accounts.create_workspace(slug="acme", approved_owners=["ops"], actor="test")
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    changes = integrations_file.apply(integrations_file.read(block), actor="test")
    assert [str(change) for change in changes] == [
        "destination helpdesk: created",
        "destination stripe-api: created",
        "HTTP action create-ticket: created",
        "HTTP action charge-customer: created",
        "source stripe: created",
        "source github: created",
        "source invoices: created",
        "subscription acme-flows: created",
    ]
    return block


def post(client, slug: str, body: bytes, headers: dict):
    extra = {f"HTTP_{name.upper().replace('-', '_')}": value for name, value in headers.items()}
    return client.post(f"/api/v1/hooks/{slug}", body, content_type="application/json", **extra)


def stripe_headers(body: bytes) -> dict:
    stamp = str(int(datetime.now(UTC).timestamp()))
    key = SECRETS["OPSCONSOLE_SOURCE_ACME_STRIPE"].encode()
    return {
        "Stripe-Signature": f"t={stamp},v1={hmac.new(key, stamp.encode() + b'.' + body, hashlib.sha256).hexdigest()}"
    }


def github_headers(body: bytes, event: str, delivery: str) -> dict:
    digest = hmac.new(SECRETS["OPSCONSOLE_SOURCE_ACME_GITHUB"].encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature-256": f"sha256={digest}", "X-GitHub-Event": event, "X-GitHub-Delivery": delivery}


def test_applying_the_example_again_changes_nothing(example):
    assert integrations_file.apply(integrations_file.read(example), actor="test") == []
    assert Source.objects.get(slug="github").rules[0]["when"] == "action == 'opened'"


def test_each_http_action_is_registered_with_the_destination_it_names(example):
    declared = yaml.safe_load(example)["http_actions"]
    assert declared, "the example declares HTTP actions"
    for entry in declared:
        action = get_action(entry["name"])
        assert (action.external, action.destination.slug, action.destination_name()) == (
            True,
            entry["destination"],
            entry["destination"],
        )


def test_a_stripe_invoice_paid_creates_one_ticket_and_other_events_are_ignored(client, example):
    invoice = {"id": "in_1", "customer": "cus_9"}
    now = int(datetime.now(UTC).timestamp())
    paid = json.dumps({"id": "evt_1", "type": "invoice.paid", "created": now, "data": {"object": invoice}}).encode()
    created = json.dumps({"id": "evt_2", "type": "invoice.created", "data": {"object": invoice}}).encode()

    first, again = (
        post(client, "stripe", paid, stripe_headers(paid)),
        post(client, "stripe", paid, stripe_headers(paid)),
    )
    ignored = post(client, "stripe", created, stripe_headers(created))

    assert [first.status_code, again.status_code, ignored.status_code] == [201, 200, 202]
    operation = Operation.objects.get()
    assert operation.key == "acme:in_1:create-ticket"
    assert operation.payload == {
        "request_id": "in_1",
        "title": "Fulfil paid invoice in_1 for cus_9",
        "priority": "normal",
    }
    assert operation.correlation_id == "cus_9"


def test_a_github_issue_opened_prepares_a_brief_and_the_ping_is_ignored(client, example):
    opened = json.dumps(
        {"action": "opened", "issue": {"number": 12, "title": "Renewal"}, "repository": {"full_name": "acme/app"}}
    ).encode()
    ping = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()

    taken = post(client, "github", opened, github_headers(opened, "issues", "guid-1"))
    pinged = post(client, "github", ping, github_headers(ping, "ping", "guid-0"))

    assert taken.status_code == 201
    assert Operation.objects.get().payload == {
        "request_id": "acme/app#12",
        "version": 1,
        "title": "Renewal",
        "owner": "ops",
    }
    assert (pinged.status_code, pinged.json()["event"]) == (202, "ping")
    assert Delivery.objects.filter(outcome="ignored", submitted_by="source:github").count() == 1


def test_a_standard_webhooks_invoice_due_signed_by_the_sender_module_charges_once(client, example):
    now = datetime.now(UTC)
    invoice = {"invoice_id": "INV-9", "customer_id": "cus_1", "amount_cents": 2500, "currency": "eur"}
    body = json.dumps({"type": "invoice.due", "timestamp": now.isoformat(), "data": invoice}).encode()
    headers = signed_headers(SECRETS["OPSCONSOLE_SOURCE_ACME_BILLING"], "msg_1", body, now)
    headers = {k: v for k, v in headers.items() if k != "Content-Type"}

    first, again = post(client, "invoices", body, headers), post(client, "invoices", body, headers)

    assert (first.status_code, first.json()["key"]) == (201, "acme:INV-9:charge-customer")
    assert again.json()["status"] == "duplicate"
    assert Operation.objects.get().payload == {
        "request_id": "INV-9",
        "customer": "cus_1",
        "amount_cents": 2500,
        "currency": "eur",
    }
