"""Performing claimed operations: each outcome class leads to its state, with one Attempt row per try."""

import logging
from datetime import timedelta

from ledger.actions import base
from ledger.engine.processing import process_due_operations
from ledger.models import Attempt, AuditEvent, ReviewDraft
from ledger.outcomes import AmbiguousError, PermanentError, Success, TransientError
from tests.ledger.conftest import START, submit, submit_brief


def kinds(operation):
    return list(AuditEvent.objects.filter(operation=operation).values_list("kind", flat=True))


def test_it_prepares_the_draft_once_and_records_one_ok_attempt(workspace, frozen):
    """prepare-brief writes its draft with `succeeded`; a second run finds nothing to do."""
    operation = submit_brief(workspace)

    assert process_due_operations(worker="w1") == 1
    assert process_due_operations(worker="w1") == 0

    operation.refresh_from_db()
    draft = ReviewDraft.objects.get()
    assert draft.operation == operation
    assert (draft.title, draft.owner, draft.state) == ("Review renewal options", "ops", "awaiting_review")
    assert operation.state == "succeeded"
    assert operation.attempts == 1
    assert operation.external_id == f"draft-{draft.pk}"
    assert operation.result == {
        "draft_id": f"draft-{draft.pk}",
        "title": "Review renewal options",
        "owner": "ops",
        "state": "awaiting_review",
    }
    assert (operation.lease_owner, operation.lease_expires_at, operation.last_error) == ("", None, None)
    attempt = Attempt.objects.get()
    assert (attempt.operation, attempt.number, attempt.fencing_token, attempt.worker, attempt.outcome) == (
        operation,
        1,
        1,
        "w1",
        "ok",
    )
    assert attempt.started_at == attempt.finished_at == START
    assert kinds(operation) == ["reserved", "claimed", "succeeded"]
    succeeded = AuditEvent.objects.get(operation=operation, kind="succeeded")
    assert (succeeded.actor, succeeded.from_state, succeeded.to_state, succeeded.attempt) == (
        "w1",
        "processing",
        "succeeded",
        attempt,
    )


def test_it_treats_an_unexpected_exception_in_an_internal_action_as_transient(
    workspace, scripted_action, frozen, caplog
):
    """The half-written effect is rolled back, the operation waits for a retry, the error is
    recorded on the attempt and logged: nothing is swallowed."""
    action = scripted_action()

    def write_then_fail(operation):
        ReviewDraft.objects.create(operation=operation, workspace=workspace, title="half", owner="ops")
        raise ValueError("column missing")

    action.destination.answer(write_then_fail)
    operation = submit(workspace, action.name)

    with caplog.at_level(logging.ERROR, logger="ledger"):
        process_due_operations(worker="w1")

    operation.refresh_from_db()
    assert ReviewDraft.objects.count() == 0
    assert operation.state == "retrying"
    assert operation.next_attempt_at > START
    assert operation.last_error == {"category": "transient", "message": "unexpected ValueError"}
    attempt = Attempt.objects.get()
    assert (attempt.outcome, attempt.error_type, attempt.error_message) == ("transient", "ValueError", "column missing")
    assert kinds(operation) == ["reserved", "claimed", "retry_scheduled"]
    assert f"unexpected error performing {operation.key}" in caplog.text
    assert "ValueError: column missing" in caplog.text


def test_it_sends_a_permanent_error_to_review_without_retrying(workspace, scripted_action, frozen):
    """A permanent failure is not repeated, whatever attempts are left."""
    action = scripted_action(max_attempts=5)
    action.destination.answer(PermanentError("owner does not exist", http_status=422))
    operation = submit(workspace, action.name)

    process_due_operations(worker="w1")
    frozen.move_to(START + timedelta(hours=1))
    assert process_due_operations(worker="w1") == 0

    operation.refresh_from_db()
    assert operation.state == "needs_review"
    assert operation.next_attempt_at is None
    assert operation.last_error == {"category": "permanent", "message": "owner does not exist"}
    attempt = Attempt.objects.get()
    assert (attempt.outcome, attempt.error_type, attempt.http_status) == ("permanent", "PermanentError", 422)
    assert len(action.destination.calls) == 1


def test_it_sends_an_operation_whose_action_is_gone_to_review(workspace, scripted_action, frozen):
    """An action type removed after the operation was reserved cannot run: a person must look."""
    action = scripted_action()
    operation = submit(workspace, action.name)
    base.registry.coded.pop(action.name)

    process_due_operations(worker="w1")

    operation.refresh_from_db()
    assert operation.state == "needs_review"
    assert operation.last_error == {"category": "permanent", "message": f"action {action.name!r} is not registered"}


def test_it_marks_an_ambiguous_external_outcome_unknown_when_keys_are_not_honoured(workspace, scripted_action, frozen):
    """The request may have reached a destination that cannot deduplicate: nothing is retried
    until reconciliation has asked the destination."""
    action = scripted_action(external=True, honours_idempotency_keys=False)
    action.destination.answer(AmbiguousError("read timeout"))
    operation = submit(workspace, action.name)

    process_due_operations(worker="w1")
    frozen.move_to(START + timedelta(hours=1))
    assert process_due_operations(worker="w1") == 0

    operation.refresh_from_db()
    assert operation.state == "unknown"
    assert operation.next_attempt_at == START + action.settle_after  # when reconciliation may first ask
    assert operation.last_error == {"category": "ambiguous", "message": "read timeout"}
    attempt = Attempt.objects.get()
    assert (attempt.outcome, attempt.idempotency_key, attempt.error_type) == ("ambiguous", "", "AmbiguousError")
    assert kinds(operation) == ["reserved", "claimed", "outcome_unknown"]
    assert len(action.destination.calls) == 1


def test_it_retries_an_ambiguous_outcome_with_the_same_idempotency_key_when_honoured(
    workspace, scripted_action, frozen
):
    """A destination that deduplicates by our key is simply asked again, with the same key."""
    action = scripted_action(external=True, honours_idempotency_keys=True)
    action.destination.answer(AmbiguousError("connection reset"), Success(external_id="crm-7"))
    operation = submit(workspace, action.name)

    process_due_operations(worker="w1")
    operation.refresh_from_db()
    assert operation.state == "retrying"
    assert operation.last_error["message"] == "retry with same key: connection reset"

    frozen.move_to(operation.next_attempt_at)
    process_due_operations(worker="w2")

    operation.refresh_from_db()
    assert operation.state == "succeeded"
    assert operation.external_id == "crm-7"
    assert list(Attempt.objects.values_list("number", "outcome", "idempotency_key")) == [
        (1, "ambiguous", operation.key),
        (2, "ok", operation.key),
    ]


def test_it_leaves_an_ambiguous_outcome_unknown_when_no_attempt_is_left(workspace, scripted_action, frozen):
    """Even with honoured keys, the last attempt's ambiguous outcome is reconciled, not dropped."""
    action = scripted_action(external=True, honours_idempotency_keys=True, max_attempts=1)
    action.destination.answer(AmbiguousError("connection reset"))
    operation = submit(workspace, action.name)

    process_due_operations(worker="w1")

    operation.refresh_from_db()
    assert operation.state == "unknown"


def test_it_treats_an_unexpected_exception_in_an_external_action_as_ambiguous(workspace, scripted_action, frozen):
    """An external failure we cannot classify may have happened after the request left."""
    action = scripted_action(external=True)
    action.destination.answer(OSError("broken pipe"))
    operation = submit(workspace, action.name)

    process_due_operations(worker="w1")

    operation.refresh_from_db()
    assert operation.state == "unknown"
    assert Attempt.objects.get().error_type == "OSError"


def test_it_never_schedules_a_retry_before_retry_after(workspace, scripted_action, frozen):
    """A destination's Retry-After beats a shorter backoff."""
    action = scripted_action(external=True, backoff_base_seconds=1.0, backoff_cap_seconds=10.0)
    action.destination.answer(TransientError("429 too many requests", retry_after=120, http_status=429))
    operation = submit(workspace, action.name)

    process_due_operations(worker="w1")

    operation.refresh_from_db()
    assert operation.state == "retrying"
    assert operation.next_attempt_at >= START + timedelta(seconds=120)
    attempt = Attempt.objects.get()
    assert (attempt.outcome, attempt.http_status) == ("transient", 429)
    frozen.move_to(START + timedelta(seconds=119))
    assert process_due_operations(worker="w1") == 0


def test_it_sends_a_retry_that_would_miss_the_deadline_to_review(workspace, scripted_action, frozen):
    """A retry that could only start after the processing deadline is not scheduled."""
    action = scripted_action(external=True, deadline=timedelta(minutes=1))
    action.destination.answer(TransientError("maintenance window", retry_after=300))
    operation = submit(workspace, action.name)

    process_due_operations(worker="w1")

    operation.refresh_from_db()
    assert operation.state == "needs_review"
    assert operation.next_attempt_at is None
    assert operation.last_error["message"].startswith("processing deadline passed: maintenance window")


def test_it_makes_retries_wait_when_the_workspace_retry_budget_is_spent(workspace, scripted_action, frozen):
    """With one retry per hour, a second failure waits until the first retry leaves the window."""
    workspace.retry_budget_per_hour = 1
    workspace.save()
    action = scripted_action(backoff_base_seconds=1.0, backoff_cap_seconds=10.0)
    action.destination.answer(TransientError("busy"), TransientError("busy"))
    first = submit(workspace, action.name, request_id="R-1")
    second = submit(workspace, action.name, request_id="R-2")

    process_due_operations(worker="w1")

    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state == second.state == "retrying"
    assert first.next_attempt_at <= START + timedelta(seconds=10)
    assert second.next_attempt_at == START + timedelta(hours=1)
    assert "workspace retry budget spent" in second.last_error["message"]
    # The time it waits for is data (ledger.timed); the API writes it as ISO 8601 with its offset.
    assert second.last_error_message.endswith("(workspace retry budget spent; waits until {retry_budget_frees_at})")
    assert second.last_error_times == {"retry_budget_frees_at": "2030-01-07T10:00:00+00:00"}
    assert second.last_error["message"].endswith("waits until 2030-01-07T10:00:00+00:00)")
    event = second.audit_events.get(kind="retry_scheduled")
    assert (event.message, event.times) == (f"transient: {second.last_error_message}", second.last_error_times)


def test_it_makes_retries_wait_when_the_workspace_has_no_retry_budget(workspace, scripted_action, frozen):
    """A zero budget holds every retry for a full window instead of failing the worker."""
    workspace.retry_budget_per_hour = 0
    workspace.save()
    action = scripted_action()
    action.destination.answer(TransientError("busy"))
    operation = submit(workspace, action.name)

    process_due_operations(worker="w1")

    operation.refresh_from_db()
    assert operation.state == "retrying"
    assert operation.next_attempt_at == START + timedelta(hours=1)
