"""Claims (docs/claims.md): a caller that performs its own side effect claims the operation over
HTTP, acts, heartbeats and reports; every answer, through the real routes. The action is the demo's
`send-invoice`, declared only in its integrations file (examples/integrations.yaml)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.core import tallies
from ledger.engine.processing import process_due_operations
from ledger.models import Attempt, AuditEvent, Delivery, Operation
from ledger.people.approvals import approve_operation
from ledger.people.pause import set_paused
from ledger.people.replays import replay_operation
from ledger.people.resolutions import resolve_operation
from ledger.sweep import sweep
from reconciliation.reconcile import reconcile_operation
from tests import configured as integrations

INVOICE = {"request_id": "INV-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def claim_body(lease_seconds=None, **data):
    body = {"action": "send-invoice", "delivery_id": "run-1", "data": INVOICE | data}
    if lease_seconds is not None:
        body["lease_seconds"] = lease_seconds
    return body


@pytest.fixture
def claims(api, send_invoice_action):
    class Claims:
        def claim(self, body=None, **kwargs):
            return api.post("/api/v1/claims", body or claim_body(**kwargs))

        def heartbeat(self, key, body):
            return api.post(f"/api/v1/claims/{key}/heartbeat", body)

        def outcome(self, key, body):
            return api.post(f"/api/v1/claims/{key}/outcome", body)

        def claimed(self, **kwargs):
            response = self.claim(**kwargs)
            assert response.status_code == 201, response.json()
            return response.json()

    return Claims()


def expire_lease(key):
    """Time passes beyond the claim's lease (the row's expiry moved back, as the clock would move on)."""
    Operation.objects.filter(key=key).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def writes():
    """What a refused call must leave as it was."""
    return (
        AuditEvent.objects.count(),
        Attempt.objects.count(),
        list(Operation.objects.values_list("state", "fencing_token", "lease_expires_at", "attempts")),
    )


# --- claimed, in progress, done -------------------------------------------------------------------


def test_the_first_claim_is_claimed_with_a_token_a_lease_and_the_idempotency_key(claims):
    before = timezone.now()
    answer = claims.claimed(lease_seconds=30)

    operation = Operation.objects.get()
    assert answer["status"] == "claimed"
    assert answer["key"] == operation.key == answer["idempotency_key"]
    assert answer["attempt"] == 1
    assert operation.state == "processing"
    assert operation.fencing_token == 1
    assert before + timedelta(seconds=29) < operation.lease_expires_at <= timezone.now() + timedelta(seconds=30)
    attempt = operation.attempt_rows.get()
    assert (attempt.number, attempt.finished_at, attempt.idempotency_key) == (1, None, operation.key)
    assert Delivery.objects.get().outcome == "accepted"


def test_a_second_claim_while_the_lease_runs_is_told_in_progress_with_retry_after(claims):
    claims.claimed(lease_seconds=30)

    response = claims.claim(lease_seconds=30)

    assert response.status_code == 409
    body = response.json()
    assert body["status"] == "in_progress"
    assert 29 <= body["retry_after"] <= 30
    assert response.headers["Retry-After"] == str(body["retry_after"])
    assert "token" not in body
    assert Operation.objects.get().fencing_token == 1
    assert [d.outcome for d in Delivery.objects.order_by("id")] == ["accepted", "duplicate"]


def test_a_reported_success_makes_every_later_claim_done_with_the_recorded_result(claims):
    claimed = claims.claimed()

    report = {"token": claimed["token"], "outcome": "succeeded", "external_id": "inv_1", "result": {"number": "F-9"}}
    recorded = claims.outcome(claimed["key"], report)

    assert recorded.status_code == 200
    assert recorded.json()["state"] == "succeeded"
    for _ in range(2):
        done = claims.claim()
        assert done.status_code == 200
        assert done.json()["status"] == "done"
        assert (done.json()["result"], done.json()["external_id"]) == ({"number": "F-9"}, "inv_1")
    attempt = Attempt.objects.get()
    assert (attempt.outcome, attempt.external_id) == ("ok", "inv_1")


def test_the_workers_never_perform_a_caller_performed_action(api, claims):
    """Submitted through /events it waits for its caller: a worker's drain claims nothing."""
    api.post("/api/v1/events", claim_body())

    assert process_due_operations() == 0
    assert Operation.objects.get().state == "pending"
    assert claims.claimed()["attempt"] == 1


# --- reports ---------------------------------------------------------------------------------------


def test_a_transient_failure_is_retried_later_under_the_same_idempotency_key(claims):
    claimed = claims.claimed()

    failed = {"token": claimed["token"], "outcome": "failed", "category": "transient", "error": "HTTP 503"}
    assert claims.outcome(claimed["key"], failed).json()["state"] == "retrying"
    later = claims.claim()

    assert later.status_code == 409
    assert later.json()["status"] == "retry_later"
    assert later.json()["last_error"] == {"category": "transient", "message": "HTTP 503"}
    assert int(later.headers["Retry-After"]) >= 1
    Operation.objects.update(next_attempt_at=timezone.now())  # the retry is due
    again = claims.claimed()
    assert again["attempt"] == 2
    assert again["idempotency_key"] == claimed["idempotency_key"]
    assert again["token"] != claimed["token"]


def test_a_permanent_failure_waits_for_a_person_and_a_replay_lets_the_next_claim_act(claims, reviewer):
    claimed = claims.claimed()
    report = {"token": claimed["token"], "outcome": "failed", "category": "permanent", "error": "HTTP 400: bad VAT id"}
    claims.outcome(claimed["key"], report)

    refused = claims.claim()
    assert (refused.status_code, refused.json()["status"]) == (409, "needs_review")

    replay_operation(Operation.objects.get(), user=reviewer, reason="VAT id fixed at the vendor")
    assert claims.claimed()["attempt"] == 2
    taken_over = claims.heartbeat(claimed["key"], {"token": claimed["token"]})
    assert (taken_over.status_code, taken_over.json()["status"]) == (409, "stale_token")


def test_an_unknown_outcome_is_decided_by_the_lookup_not_by_the_next_caller(claims, standin):
    claimed = claims.claimed()
    standin.http.post(
        "/records",
        json={"reference": claimed["key"], "payload": {}},
        headers={"Idempotency-Key": claimed["idempotency_key"]},
    )
    report = {"token": claimed["token"], "outcome": "unknown", "error": "timed out after sending"}
    assert claims.outcome(claimed["key"], report).json()["state"] == "unknown"
    assert claims.claim().json()["status"] == "unknown"

    operation = Operation.objects.get()
    assert reconcile_operation(operation, asked_by_person=True) == "found"
    assert claims.claim().json()["status"] == "done"
    assert len(standin.records()) == 1


def test_a_lookup_that_finds_no_record_lets_the_next_claim_act_under_the_same_key(claims, standin):
    claimed = claims.claimed()
    claims.outcome(claimed["key"], {"token": claimed["token"], "outcome": "unknown", "error": "connection reset"})
    # Past the action's settle time: a request the caller sent can no longer land.
    Attempt.objects.update(started_at=timezone.now() - timedelta(minutes=5))

    assert reconcile_operation(Operation.objects.get(), asked_by_person=True) == "absent"

    event = Operation.objects.get().audit_events.get(kind="reconciled_absent")
    assert event.message == "the destination confirms no record; its caller may claim it again under the same key"
    again = claims.claimed()
    assert (again["attempt"], again["idempotency_key"]) == (2, claimed["idempotency_key"])


def test_the_same_report_again_is_answered_as_recorded_and_a_different_one_is_refused(claims):
    claimed = claims.claimed()
    failed = {"token": claimed["token"], "outcome": "failed", "category": "transient", "error": "HTTP 503"}
    first = claims.outcome(claimed["key"], failed)
    before = writes()

    again = claims.outcome(claimed["key"], failed)
    other = claims.outcome(claimed["key"], {"token": claimed["token"], "outcome": "succeeded"})

    assert again.status_code == 200
    assert {k: v for k, v in again.json().items() if k != "message"} == {
        k: v for k, v in first.json().items() if k != "message"
    }
    assert (other.status_code, other.json()["status"]) == (409, "outcome_conflict")
    assert writes() == before


# --- fencing ---------------------------------------------------------------------------------------


def test_a_stale_or_forged_token_changes_nothing(claims):
    claimed = claims.claimed()
    another = claims.claimed(request_id="INV-8")  # a real token, of another operation's claim
    before = writes()

    for token in (claimed["token"] + "x", "1.1:forged", another["token"]):
        beat = claims.heartbeat(claimed["key"], {"token": token, "lease_seconds": 600})
        report = claims.outcome(claimed["key"], {"token": token, "outcome": "succeeded"})
        assert (beat.status_code, beat.json()["status"]) == (409, "stale_token")
        assert (report.status_code, report.json()["status"]) == (409, "stale_token")
    assert writes() == before


def test_a_heartbeat_extends_the_lease_of_the_claim_in_hand(claims):
    claimed = claims.claimed(lease_seconds=10)

    beat = claims.heartbeat(claimed["key"], {"token": claimed["token"], "lease_seconds": 600})

    assert beat.status_code == 200
    assert Operation.objects.get().lease_expires_at > timezone.now() + timedelta(seconds=590)


def test_a_lease_that_expires_without_an_outcome_makes_the_operation_unknown(claims):
    claimed = claims.claimed(lease_seconds=5)
    expire_lease(claimed["key"])

    refused = claims.claim()

    assert (refused.status_code, refused.json()["status"]) == (409, "unknown")
    operation = Operation.objects.get()
    assert operation.state == "unknown"
    assert operation.last_error_message.startswith("the caller reported no outcome before its lease expired")
    assert operation.attempt_rows.get().outcome == "abandoned"
    assert operation.audit_events.filter(kind="lease_expired", to_state="unknown").count() == 1
    late = claims.outcome(claimed["key"], {"token": claimed["token"], "outcome": "succeeded"})
    assert (late.status_code, late.json()["status"]) == (409, "stale_token")
    assert Operation.objects.get().state == "unknown"


def test_the_sweep_makes_an_expired_claim_unknown_and_a_person_resolving_it_makes_claims_done(claims, reviewer):
    claimed = claims.claimed(lease_seconds=5)
    expire_lease(claimed["key"])

    assert sweep().leases_expired == 1
    beat = claims.heartbeat(claimed["key"], {"token": claimed["token"]})
    assert (beat.status_code, beat.json()["status"]) == (409, "stale_token")
    resolve_operation(Operation.objects.get(), user=reviewer, external_id="inv_77", reason="found it in the vendor UI")

    done = claims.claim()
    assert (done.status_code, done.json()["external_id"]) == (200, "inv_77")


def test_a_heartbeat_after_the_lease_expired_is_stale_and_the_operation_unknown(claims):
    claimed = claims.claimed(lease_seconds=5)
    expire_lease(claimed["key"])

    beat = claims.heartbeat(claimed["key"], {"token": claimed["token"], "lease_seconds": 60})

    assert (beat.status_code, beat.json()["status"], beat.json()["state"]) == (409, "stale_token", "unknown")


# --- held, approval, review -------------------------------------------------------------------------


def test_a_paused_action_is_held_with_its_scope_and_reason(claims, workspace):
    set_paused(paused=True, actor="ops", reason="vendor incident", action="send-invoice")

    response = claims.claim()

    assert response.status_code == 423
    body = response.json()
    assert (body["status"], body["scope"], body["reason"]) == ("held", "action send-invoice", "vendor incident")
    assert response.headers["Retry-After"] == "60"
    assert Operation.objects.get().state == "pending"
    set_paused(paused=False, actor="ops", action="send-invoice")
    assert claims.claimed()["attempt"] == 1


def test_a_consequential_caller_action_waits_for_approval(claims, approver, standin):
    integrations.apply_send_invoice(standin.url, consequential=True)

    assert claims.claim().json()["status"] == "awaiting_approval"
    operation = Operation.objects.get()
    approve_operation(operation, user=approver, fingerprint=operation.fingerprint)

    assert claims.claimed()["attempt"] == 1


def test_a_conflicting_payload_is_refused_and_queued_as_intake_does(claims):
    claims.claimed()

    response = claims.claim(amount_cents=9900)

    assert response.status_code == 409
    assert (response.json()["status"], response.json()["reason"]) == ("blocked", "payload_conflict")
    assert response.json()["fields"] == ["amount_cents"]


# --- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**claim_body(), "lease_seconds": 1}, "lease_seconds"),
        ({**claim_body(), "lease_seconds": 99999}, "lease_seconds"),
        ({**claim_body(), "lease_seconds": "60"}, "lease_seconds"),
        ({**claim_body(), "lease_seconds": True}, "lease_seconds"),
        ({**claim_body(), "action": "file-ticket"}, "action"),
        ({**claim_body(), "action": "no-such-action"}, "action"),
        (claim_body(amount_cents=0), "data.amount_cents"),
    ],
)
def test_a_bad_claim_is_refused_naming_the_field_and_writes_no_operation(claims, body, field):
    response = claims.claim(body)

    assert response.status_code == 422
    assert field in [error["field"] for error in response.json()["errors"]]
    assert not Operation.objects.exists()
    assert Delivery.objects.get().outcome == "invalid"


@pytest.mark.parametrize(
    "report",
    [
        {"outcome": "failed"},
        {"outcome": "succeeded", "category": "transient"},
        {"outcome": "unknown", "external_id": "x"},
        {"outcome": "done"},
        {"outcome": "failed", "category": "permanent", "retry_after": 5},
        {"outcome": "succeeded", "external_id": "line\nbreak"},
        {"outcome": "succeeded", "result": {"note": "nul\u0000"}},
        {"outcome": "succeeded", "extra": 1},
    ],
)
def test_a_bad_report_is_refused_and_changes_nothing(claims, report):
    claimed = claims.claimed()
    before = writes()

    response = claims.outcome(claimed["key"], {"token": claimed["token"], **report})

    assert response.status_code == 422
    assert response.json()["reason"] == "invalid_input"
    assert writes() == before


def test_a_report_with_a_number_beyond_a_double_is_refused_and_changes_nothing(api, claims):
    """1e400 would be read as infinity, which the result's jsonb column cannot hold: a 400, not a 500."""
    claimed = claims.claimed()
    before = writes()
    body = '{"token": "' + claimed["token"] + '", "outcome": "succeeded", "result": {"total": 1e400}}'

    response = api.post(f"/api/v1/claims/{claimed['key']}/outcome", body.encode())

    assert response.status_code == 400
    assert response.json()["reason"] == "malformed_json"
    assert writes() == before


def test_an_action_configured_while_the_claim_was_decided_is_claimed_again_not_failed(claims, monkeypatch):
    """The claim looked the action up before intake did, and missed it (configured in between): it
    could not ask whether a caller performs it, so it claims nothing and asks to be called again."""
    with monkeypatch.context() as patched:
        patched.setattr("ledger.callers.claims.registry", {})
        response = claims.claim()

    assert response.status_code == 409
    assert response.json()["status"] == "in_progress"
    assert response.headers["Retry-After"] == "1"
    assert Operation.objects.get().fencing_token == 0
    assert claims.claimed()["status"] == "claimed"


def test_a_report_for_a_key_with_no_operation_is_not_found(claims):
    response = claims.outcome("demo:nothing", {"token": "1.1:x", "outcome": "succeeded"})

    assert response.status_code == 404


# --- metrics ---------------------------------------------------------------------------------------


def test_claims_are_counted_by_answer_and_expired_leases_by_action(claims):
    claimed = claims.claimed(lease_seconds=5)
    claims.claim()
    expire_lease(claimed["key"])
    claims.claim()

    totals = {(name, labels): value for (name, labels), value in tallies.totals().items()}
    assert totals[(tallies.CLAIMS, '{"action": "send-invoice", "answer": "claimed"}')] == 1
    assert totals[(tallies.CLAIMS, '{"action": "send-invoice", "answer": "in_progress"}')] == 1
    assert totals[(tallies.CLAIMS, '{"action": "send-invoice", "answer": "unknown"}')] == 1
    assert totals[(tallies.LEASES_EXPIRED, '{"action": "send-invoice"}')] == 1


@pytest.mark.parametrize("key", ["demo:nul\u0000key", "demo:\ud800"])
def test_a_key_the_database_cannot_hold_names_no_operation(claims, key):
    from urllib.parse import quote

    path = quote(key.encode("utf-8", "surrogatepass"), safe=":")
    assert claims.heartbeat(path, {"token": "1.1:x"}).status_code == 404
    assert claims.outcome(path, {"token": "1.1:x", "outcome": "succeeded"}).status_code == 404


def test_held_work_is_not_late_its_deadline_waits_for_the_resume(claims):
    """The sweep leaves held work alone, paused time not counting; a claim does the same."""
    claims.claim(lease_seconds=None)  # reserved and claimed: make it pending again, past its deadline
    Operation.objects.update(state="pending", deadline=timezone.now() - timedelta(seconds=1))
    set_paused(paused=True, actor="ops", reason="vendor incident", action="send-invoice")

    response = claims.claim()

    assert (response.status_code, response.json()["status"]) == (423, "held")
    assert Operation.objects.get().state == "pending"


def test_a_claim_after_a_resume_is_given_the_time_held_and_writes_it(claims, frozen):
    """The deadline passed while a pause held the operation: after the resume it is claimed, not
    sent to review, and its claim writes the deadline with the held hour given."""
    claims.claim()
    claimed_at = timezone.now()
    Operation.objects.update(state="pending", state_changed_at=claimed_at, deadline=claimed_at + timedelta(minutes=1))
    set_paused(paused=True, actor="ops", reason="vendor incident", action="send-invoice")
    frozen.move_to(claimed_at + timedelta(hours=1))
    set_paused(paused=False, actor="ops", action="send-invoice")

    response = claims.claim()

    assert (response.status_code, response.json()["status"]) == (201, "claimed")
    assert Operation.objects.get().deadline == claimed_at + timedelta(hours=1, minutes=1)


def test_a_claim_past_the_deadline_sends_the_operation_to_review(claims):
    claims.claim()
    Operation.objects.update(state="pending", deadline=timezone.now() - timedelta(seconds=1))

    response = claims.claim()

    assert (response.status_code, response.json()["status"]) == (409, "needs_review")
    assert Operation.objects.get().audit_events.filter(kind="deadline_passed").count() == 1


def test_the_files_payload_retention_redacts_a_claimed_invoice_and_a_later_claim_is_still_done(claims, standin, frozen):
    from ledger import retention
    from tests.ledger.conftest import START

    integrations.apply_send_invoice(standin.url, payload_retention_days=2)
    answer = claims.claimed()
    claims.outcome(answer["key"], {"token": answer["token"], "outcome": "succeeded", "external_id": "inv-1"})

    assert retention.purge(as_of=START + timedelta(days=2) - timedelta(seconds=1)).total("redacted") == 0
    assert retention.purge(as_of=START + timedelta(days=2, seconds=1)).total("redacted") == 1
    operation = Operation.objects.get()
    assert operation.payload == {"request_id": "INV-7", "version": 1}  # its identity, the tombstone's
    frozen.move_to(START + timedelta(days=3))
    again = claims.claim()
    assert (again.status_code, again.json()["status"], again.json()["external_id"]) == (200, "done", "inv-1")
