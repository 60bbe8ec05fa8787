"""examples/integrations.yaml (the demo's, and the proof that a new vendor needs no Python) works end
to end: a signed invoice.paid lands through its source as a `fulfil-invoice` operation, our engine
calls the fulfilment system (the stand-in destination) with the destination's token and key, a lost
answer is found by repeating under the key, and the reconciliation audit lists its records."""

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from ledger.actions import get_action
from ledger.engine.processing import process_due_operations
from ledger.integrations import file as integrations_file
from ledger.models import Operation
from opsconsole.send_webhook import invoice_paid, signed_headers
from reconciliation.reconcile import reconcile_operation
from reconciliation.two_way_audit import run_audit

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "integrations.yaml"
HOOK_SECRET = "whsec_b3BzY29uc29sZSBleGFtcGxlIHdlYmhvb2sgc2VjcmV0ISE="


@pytest.fixture
def example(workspace, standin, monkeypatch):
    """The example file, its fulfilment destination pointed at this test's stand-in."""
    monkeypatch.setenv("OPSCONSOLE_SOURCE_DEMO_HOOK_SECRET", HOOK_SECRET)
    monkeypatch.setenv("OPSCONSOLE_DEMO_FULFILMENT_TOKEN", "demo-token")
    text = EXAMPLE.read_text().replace("http://127.0.0.1:8765", standin.url)
    changes = [str(change) for change in integrations_file.apply(integrations_file.read(text), actor="test")]
    assert changes == [
        "destination fulfilment: created",
        "destination invoicing: created",
        "HTTP action fulfil-invoice: created",
        "HTTP action send-invoice: created",
        "source billing: created",
    ]
    return text


def deliver(client, delivery_id: str = "msg_1"):
    now = datetime.now(UTC)
    body = json.dumps(invoice_paid(now)).encode()
    headers = signed_headers(HOOK_SECRET, delivery_id, body, now)
    extra = {
        f"HTTP_{name.upper().replace('-', '_')}": value for name, value in headers.items() if name != "Content-Type"
    }
    return client.post("/api/v1/hooks/billing", body, content_type="application/json", **extra)


def test_a_signed_invoice_paid_becomes_one_record_at_the_fulfilment_system(client, example, standin):
    first, again = deliver(client), deliver(client)
    assert (first.status_code, first.json()["key"]) == (201, "demo:INV-7:fulfil-invoice")
    assert again.json()["status"] == "duplicate"

    process_due_operations(worker="w1")

    operation = Operation.objects.get()
    assert operation.state == "succeeded", operation.last_error_message
    [record] = standin.records()
    assert record["reference"] == operation.key
    assert record["idempotency_key"] == operation.key
    assert record["payload"] == {
        "invoice_id": "INV-7",
        "customer_id": "C-1001",
        "amount_cents": 4500,
        "currency": "EUR",
    }
    assert operation.external_id == record["id"]


def test_a_lost_answer_is_found_by_repeating_under_the_key(client, example, standin):
    standin.fail_next({"kind": "drop_after_commit"})
    deliver(client)
    process_due_operations(worker="w1")
    operation = Operation.objects.get()
    assert operation.state == "retrying"  # the destination keeps our key: safe to repeat

    Operation.objects.filter(pk=operation.pk).update(next_attempt_at=timezone.now())
    process_due_operations(worker="w1")

    operation.refresh_from_db()
    [record] = standin.records()
    assert (operation.state, operation.external_id) == ("succeeded", record["id"])


def test_the_lookup_repeats_under_the_key_and_the_audit_lists_the_records(client, example, standin, time_machine):
    deliver(client)
    process_due_operations(worker="w1")
    operation = Operation.objects.get()
    Operation.objects.filter(pk=operation.pk).update(state="unknown")
    operation.refresh_from_db()

    assert reconcile_operation(operation, asked_by_person=True) == "found"
    assert len(standin.records()) == 1

    time_machine.move_to(timezone.now() + timedelta(minutes=1))  # past the action's settle time
    run = run_audit(since=timezone.now() - timedelta(hours=1))
    assert (run.status, run.error) == ("succeeded", "")
    assert run.new_mismatches == 0
    # What the audit compared: the record as the file's listing reads it.
    [listed] = get_action("fulfil-invoice").list_records(timezone.now() - timedelta(hours=1), timezone.now())
    assert listed == {
        "id": operation.external_id,
        "reference": operation.key,
        "created_at": standin.records()[0]["created_at"],
        "payload": {"invoice_id": "INV-7", "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"},
    }


def test_the_callers_send_invoice_is_looked_up_and_audited_at_the_invoicing_system(api, example, standin, time_machine):
    """`send-invoice` is performed by its caller: claimed over the API, created at the invoicing
    system (the stand-in) by the caller under the claim's key, reported; the file's lookup finds it
    and the reconciliation audit lists it, its fields as the caller sent them, with no mismatch."""
    data = {"request_id": "INV-9", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}
    claim = api.post("/api/v1/claims", {"action": "send-invoice", "data": data}).json()
    assert claim["status"] == "claimed", claim
    payload = {name: data[name] for name in ("customer_id", "amount_cents", "currency")}
    created = standin.http.post(
        "/records",
        json={"reference": claim["key"], "payload": payload},
        headers={"Idempotency-Key": claim["idempotency_key"]},
    ).json()
    reported = api.post(
        f"/api/v1/claims/{claim['key']}/outcome",
        {"token": claim["token"], "outcome": "succeeded", "external_id": created["id"]},
    )
    assert reported.status_code == 200, reported.json()
    operation = Operation.objects.get(key=claim["key"])

    assert get_action("send-invoice").lookup(operation).external_id == created["id"]
    time_machine.move_to(timezone.now() + timedelta(minutes=1))  # past the action's settle time
    run = run_audit(since=timezone.now() - timedelta(hours=1))
    assert (run.status, run.error, run.new_mismatches) == ("succeeded", "", 0)
    [listed] = get_action("send-invoice").list_records(timezone.now() - timedelta(hours=1), timezone.now())
    assert (listed["reference"], listed["payload"]) == (operation.key, payload)
