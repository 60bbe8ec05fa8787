"""Configured HTTP actions, driven by our engine against third-party servers no one here
wrote: json-server (no idempotency; a lost answer is found by the lookup GET) and
stripe-stateful-mock (honours Idempotency-Key; a lost answer is found by repeating under the key).
The actions come from an integrations file (tests/configured.py), not from Python."""

import json
import time
from datetime import timedelta

import httpx
from django.utils import timezone

from ledger.actions import get_action
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.integrations import saving
from ledger.models import Attempt, AuditEvent, HttpAction, Operation
from reconciliation.reconcile import reconcile_operation
from tests import configured as integrations_file
from tests import third_party

pytestmark = third_party.needs_node

TICKET = {"request_id": "T-1", "title": "Printer on fire", "priority": "high"}
CHARGE = {"request_id": "C-1", "customer": "cus_ann", "amount_cents": 2500, "currency": "eur"}


def submitted(workspace, action: str, data: dict, delivery_id: str = "d-1") -> Operation:
    result = submit_event(
        workspace=workspace, raw={"action": action, "delivery_id": delivery_id, "data": data}, source="api"
    )
    assert result.outcome == "accepted", result
    return result.operation


def processed(operation: Operation) -> Operation:
    process_due_operations(worker="w1")
    operation.refresh_from_db()
    return operation


def make_due(operation: Operation) -> None:
    Operation.objects.filter(pk=operation.pk).update(next_attempt_at=timezone.now())


def charges(stripe_mock) -> list[dict]:
    answer = httpx.get(
        f"{stripe_mock.url}/v1/charges",
        params={"limit": 100},
        headers={"Authorization": f"Bearer {third_party.STRIPE_TEST_KEY}"},
    )
    answer.raise_for_status()
    return answer.json()["data"]


# json-server: no idempotency.


def test_a_configured_action_creates_one_ticket_carrying_our_key(workspace, json_server, configured):
    output = configured(json_server=json_server)
    assert "destination helpdesk: created" in output
    assert "HTTP action create-ticket: created" in output

    operation = processed(submitted(workspace, "create-ticket", TICKET))

    assert operation.state == "succeeded"
    [ticket] = json_server.db()["tickets"]
    assert ticket == {"source_key": operation.key, "title": "Printer on fire", "priority": "high", "id": 1}
    assert (operation.external_id, operation.result["record_id"]) == ("1", "1")
    assert [(r["method"], r["path"]) for r in json_server.requests()] == [("POST", "/tickets")]


def test_a_dropped_answer_is_reconciled_by_the_lookup_and_leaves_one_ticket(workspace, json_server, configured):
    configured(json_server=json_server)
    json_server.fail_next("POST /tickets", "drop_answer")

    operation = processed(submitted(workspace, "create-ticket", TICKET))
    assert operation.state == "unknown"  # the server acted; no answer came; no key to repeat under

    assert reconcile_operation(operation) == "found"
    operation.refresh_from_db()
    assert operation.state == "succeeded"
    assert operation.external_id == "1"
    assert len(json_server.db()["tickets"]) == 1
    assert [r["path"] for r in json_server.requests()][-1] == f"/tickets?source_key={operation.key.replace(':', '%3A')}"
    assert process_due_operations() == 0  # nothing sent again


def test_an_answer_that_may_hide_an_effect_but_did_not_is_found_absent_and_sent_again(
    workspace, json_server, configured
):
    configured(json_server=json_server)
    json_server.fail_next("POST /tickets", "status", status=502)  # refused before acting, as a 502 may be

    operation = processed(submitted(workspace, "create-ticket", TICKET))
    assert operation.state == "unknown"
    assert reconcile_operation(operation) == "absent"
    operation.refresh_from_db()
    assert operation.state == "retrying"

    make_due(operation)
    assert processed(operation).state == "succeeded"
    assert len(json_server.db()["tickets"]) == 1


def test_invalid_data_is_refused_per_field_by_the_json_schema(api, json_server, configured):
    configured(json_server=json_server)

    answer = api.post(
        "/api/v1/events",
        {"action": "create-ticket", "delivery_id": "d-1", "data": {"request_id": "T-1", "priority": "urgent", "x": 1}},
    )

    assert answer.status_code == 422
    fields = {error["field"]: error["message"] for error in answer.json()["errors"]}
    assert set(fields) == {"data.title", "data.priority", "data.x"}
    assert "'urgent' is not one of" in fields["data.priority"]
    assert Operation.objects.count() == 0


def test_a_client_error_is_permanent_with_the_servers_answer_kept(workspace, json_server, configured):
    configured(json_server=json_server)
    json_server.fail_next("POST /tickets", "status", status=422)

    operation = processed(submitted(workspace, "create-ticket", TICKET))

    assert operation.state == "needs_review"
    assert operation.last_error_category == "permanent"
    assert "HTTP 422" in operation.last_error_message
    assert "answered 422 before acting" in operation.last_error_message


# stripe-stateful-mock: honours Idempotency-Key (form-encoded, bearer key from the environment).


def test_five_timeouts_in_a_row_reuse_one_key_and_leave_one_charge(workspace, stripe_mock, configured, monkeypatch):
    configured_key(monkeypatch)
    configured(stripe_mock=stripe_mock, max_attempts=6)
    stripe_mock.fail_next("POST /v1/charges", "delay_answer", ms=1500, times=5)  # our timeout: 1 s

    operation = submitted(workspace, "charge-customer", CHARGE)
    for _ in range(5):
        operation = processed(operation)
        assert operation.state == "retrying", operation.last_error_message
        make_due(operation)
    operation = processed(operation)

    assert operation.state == "succeeded"
    [charge] = charges(stripe_mock)
    assert operation.external_id == charge["id"]
    assert (charge["amount"], charge["currency"], charge["metadata"]) == (
        2500,
        "eur",
        {"source_key": operation.key, "customer": "cus_ann"},
    )
    posts = wait_for_posts(stripe_mock, 6)  # a delayed answer is logged when it is finally sent
    assert len(posts) == 6
    assert {r["idempotency_key"] for r in posts} == {operation.key}
    assert set(Attempt.objects.filter(operation=operation).values_list("outcome", flat=True)) == {"ambiguous", "ok"}


def test_a_dropped_answer_is_reconciled_by_repeating_under_the_same_key(
    workspace, stripe_mock, configured, monkeypatch
):
    configured_key(monkeypatch)
    configured(stripe_mock=stripe_mock, max_attempts=1)  # no retry: the lookup decides
    stripe_mock.fail_next("POST /v1/charges", "drop_answer")

    operation = processed(submitted(workspace, "charge-customer", CHARGE))
    assert operation.state == "unknown"
    [charge] = charges(stripe_mock)

    assert reconcile_operation(operation) == "found"
    operation.refresh_from_db()
    assert (operation.state, operation.external_id) == ("succeeded", charge["id"])
    assert len(charges(stripe_mock)) == 1  # the repeat was answered with the first charge
    posts = [r for r in stripe_mock.requests() if r["method"] == "POST"]
    assert [r["idempotency_key"] for r in posts] == [operation.key, operation.key]


def test_a_conflicting_reuse_of_the_key_is_permanent_with_the_vendors_message(
    workspace, stripe_mock, configured, monkeypatch, tmp_path
):
    configured_key(monkeypatch)
    configured(stripe_mock=stripe_mock)
    stripe_mock.fail_next("POST /v1/charges", "drop_answer")
    operation = processed(submitted(workspace, "charge-customer", CHARGE))
    assert operation.state == "retrying"  # same key, safe to repeat...

    configured(stripe_mock=stripe_mock, description="changed meanwhile")  # ...but the request changed
    make_due(operation)
    operation = processed(operation)

    assert operation.state == "needs_review"
    assert operation.last_error_category == "permanent"
    assert "HTTP 400" in operation.last_error_message
    assert "idempotent requests can only be used with the same parameters" in operation.last_error_message
    assert len(charges(stripe_mock)) == 1
    # The vendor's own answer is kept on the try: its body and its code (Stripe's error.type, as
    # the destination's error_code path says; tests/configured.py).
    refused = Attempt.objects.filter(operation=operation).order_by("number").last()
    assert json.loads(refused.response_body)["error"]["type"] == refused.error_code == "idempotency_error"
    assert f"[{refused.error_code}]" in operation.last_error_message
    # Each try names the configuration it ran under: the change shows between them.
    first, second = Attempt.objects.filter(operation=operation).order_by("number")
    assert first.config_version_id != second.config_version_id
    assert "changed meanwhile" in str(second.config_version.content)


def test_once_the_vendor_forgot_the_key_a_lost_answer_is_not_repeated(workspace, stripe_mock, configured, monkeypatch):
    configured_key(monkeypatch)
    configured(stripe_mock=stripe_mock)
    stripe_mock.fail_next("POST /v1/charges", "drop_answer")
    operation = submitted(workspace, "charge-customer", CHARGE)
    operation = processed(operation)
    assert operation.state == "retrying"
    Attempt.objects.filter(operation=operation).update(started_at=timezone.now() - timedelta(hours=23))
    stripe_mock.fail_next("POST /v1/charges", "drop_answer")
    make_due(operation)

    operation = processed(operation)

    assert operation.state == "unknown"  # 23 h after the first try, past 90 % of the vendor's 24 h
    assert reconcile_operation(operation) == "gave_up"  # and no repeat: a person decides
    operation.refresh_from_db()
    assert operation.state == "needs_review"
    assert len([r for r in stripe_mock.requests() if r["method"] == "POST"]) == 2


def test_a_missing_credential_sends_nothing_and_says_which_variable(workspace, stripe_mock, configured, monkeypatch):
    monkeypatch.delenv(configured_env(), raising=False)
    configured(stripe_mock=stripe_mock)

    operation = processed(submitted(workspace, "charge-customer", CHARGE))

    assert operation.state == "needs_review"
    assert f"set {configured_env()}" in operation.last_error_message
    assert stripe_mock.requests() == []


def test_saving_a_configured_action_is_audited(workspace, json_server, configured):
    configured(json_server=json_server)
    kinds = list(AuditEvent.objects.order_by("id").values_list("kind", "message"))
    assert ("destination_created", f"destination helpdesk: {json_server.url} (auth none)") in kinds
    assert any(kind == "http_action_created" and "create-ticket" in message for kind, message in kinds)


def wait_for_posts(server, count: int, timeout: float = 5.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        posts = [r for r in server.requests() if r["method"] == "POST"]
        if len(posts) >= count or time.monotonic() > deadline:
            return posts
        time.sleep(0.05)


def configured_key(monkeypatch) -> None:
    integrations_file.stripe_key(monkeypatch)


def configured_env() -> str:
    return integrations_file.STRIPE_KEY_ENV


def test_the_audits_lookup_of_a_succeeded_charge_never_repeats_the_request(
    workspace, stripe_mock, configured, monkeypatch
):
    """Repeating under the key is for an outcome not known; a succeeded operation's lookup (the
    reconciliation audit asks one) must not send the charge again."""
    configured_key(monkeypatch)
    configured(stripe_mock=stripe_mock)
    operation = processed(submitted(workspace, "charge-customer", CHARGE))
    assert operation.state == "succeeded"

    answer = get_action("charge-customer").lookup(operation)

    assert type(answer).__name__ == "CannotTell"
    assert answer.final
    assert len([r for r in stripe_mock.requests() if r["method"] == "POST"]) == 1


def test_a_lookup_may_read_a_404_as_no_record(workspace, json_server, configured):
    configured(json_server=json_server)
    row = HttpAction.objects.get(name="create-ticket")
    row.lookup = {"path": "/tickets/{{ data.request_id }}", "absent_on_404": True}
    saving.save_http_action(row, actor="test")
    json_server.fail_next("POST /tickets", "status", status=502)
    operation = processed(submitted(workspace, "create-ticket", TICKET))
    assert operation.state == "unknown"

    assert reconcile_operation(operation) == "absent"
    assert json_server.requests()[-1]["path"] == "/tickets/T-1"
