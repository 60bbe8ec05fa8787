"""The sweep re-drives what lost tasks and dead workers left behind, and records a heartbeat."""

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings
from django_q.models import OrmQ

from ledger.engine.claiming import claim_due_operations
from ledger.engine.processing import process_due_operations
from ledger.models import Attempt, AuditEvent, Heartbeat, Operation, ReviewDraft, Tally
from ledger.outcomes import Success
from ledger.people.pause import set_paused
from ledger.sweep import sweep
from tests.ledger.conftest import START, submit, submit_brief

LATER = START + timedelta(seconds=settings.OPSCONSOLE_LEASE_SECONDS + 1)


class WorkerDied(BaseException):
    """Stands for SIGKILL in the middle of a destination call: nothing after it runs."""


def lease_event(operation):
    return AuditEvent.objects.get(operation=operation, kind="lease_expired")


def test_it_returns_an_internal_operation_with_an_expired_lease_to_pending(workspace, frozen):
    """Nothing outside our database happened, so the operation simply runs again."""
    operation = submit_brief(workspace)
    claim_due_operations(limit=10, worker="dead")

    report = sweep(now=LATER)

    operation.refresh_from_db()
    assert operation.state == "pending"
    assert (operation.lease_owner, operation.lease_expires_at) == ("", None)
    assert report.leases_expired == 1
    event = lease_event(operation)
    assert (event.actor, event.from_state, event.to_state) == ("sweep", "processing", "pending")
    assert event.message == "lease of dead expired (claim 1)"

    frozen.move_to(LATER)
    process_due_operations(worker="alive")
    operation.refresh_from_db()
    assert operation.state == "succeeded"
    assert ReviewDraft.objects.count() == 1


def test_it_marks_an_external_operation_unknown_when_its_try_had_begun(workspace, scripted_action, frozen):
    """The request may have reached the destination: reconcile, do not resend."""
    action = scripted_action(external=True)
    action.destination.answer(WorkerDied())
    operation = submit(workspace, action.name)
    with pytest.raises(WorkerDied):
        process_due_operations(worker="dead")

    report = sweep(now=LATER)

    operation.refresh_from_db()
    assert operation.state == "unknown"
    assert report.leases_expired == 1
    attempt = Attempt.objects.get()
    assert (attempt.outcome, attempt.finished_at) == ("abandoned", START)
    event = lease_event(operation)
    assert (event.to_state, event.error_category) == ("unknown", "ambiguous")
    assert claim_due_operations(limit=10, worker="alive", now=LATER) == []
    abandoned = Tally.objects.filter(name="attempts", labels__contains='"abandoned"')
    assert sum(abandoned.values_list("value", flat=True)) == 1  # counted with the move, once


def test_it_returns_an_external_operation_to_pending_when_no_try_had_begun(workspace, scripted_action, frozen):
    """A worker that died between claim and the start of its try sent nothing: the operation runs
    again, and the destination is called exactly once, by the next worker's claim."""
    action = scripted_action(external=True)
    operation = submit(workspace, action.name)
    claim_due_operations(limit=10, worker="dead")

    report = sweep(now=LATER)

    operation.refresh_from_db()
    assert operation.state == "pending"
    assert (operation.lease_owner, operation.lease_expires_at) == ("", None)
    assert report.leases_expired == 1
    event = lease_event(operation)
    assert (event.from_state, event.to_state) == ("processing", "pending")
    assert Attempt.objects.count() == 0

    frozen.move_to(LATER)
    assert process_due_operations(worker="alive") == 1

    operation.refresh_from_db()
    assert operation.state == "succeeded"
    assert action.destination.calls == [(operation.key, 2)]  # once, under the second claim's token
    assert list(Attempt.objects.values_list("operation", "outcome")) == [(operation.pk, "ok")]


def test_it_leaves_a_live_lease_alone(workspace, frozen):
    """A claim whose lease still holds belongs to a worker that may still finish."""
    operation = submit_brief(workspace)
    claim_due_operations(limit=10, worker="busy")

    report = sweep(now=LATER - timedelta(seconds=2))

    operation.refresh_from_db()
    assert (operation.state, operation.lease_owner) == ("processing", "busy")
    assert report.leases_expired == 0


def test_it_sends_operations_past_their_deadline_to_review(workspace, scripted_action, frozen):
    """Pending or retrying work that can no longer run in time waits for a person, not a worker."""
    action = scripted_action(deadline=timedelta(minutes=5))
    pending = submit(workspace, action.name, request_id="R-1")
    retrying = submit(workspace, action.name, request_id="R-2")
    Operation.objects.filter(pk=retrying.pk).update(state="retrying", next_attempt_at=START + timedelta(minutes=10))
    on_time = submit_brief(workspace)

    report = sweep(now=START + timedelta(minutes=5))

    assert report.deadlines_passed == 2
    states = dict(Operation.objects.values_list("pk", "state"))
    assert states == {pending.pk: "needs_review", retrying.pk: "needs_review", on_time.pk: "pending"}
    event = AuditEvent.objects.get(operation=pending, kind="deadline_passed")
    assert (event.actor, event.from_state, event.error_category) == ("sweep", "pending", "deadline")
    pending.refresh_from_db()
    assert pending.last_error == {"category": "deadline", "message": "processing deadline passed"}


@override_settings(OPSCONSOLE_CLAIM_BATCH=2)
def test_it_enqueues_a_processing_task_per_worker_for_the_due_work(workspace, frozen):
    """Lost nudges and due retries are found; one task per claim batch is enqueued, at most one per
    worker (Q_WORKERS 2; each full batch tops the queue up, tests/ledger/engine/test_nudges.py)."""
    due = [submit_brief(workspace, request_id=f"R-{n}") for n in range(5)]
    not_yet = submit_brief(workspace, request_id="R-later")
    Operation.objects.filter(pk=not_yet.pk).update(state="retrying", next_attempt_at=START + timedelta(hours=1))
    OrmQ.objects.all().delete()

    report = sweep(now=START + timedelta(minutes=2))

    assert (report.due, report.nudges) == (5, 2)
    assert report.oldest_due_seconds == 120
    assert OrmQ.objects.count() == 2
    # The sweep only nudges: it claims nothing and leaves the not-yet-due retry alone.
    states = dict(Operation.objects.values_list("pk", "state"))
    assert states == {**{op.pk: "pending" for op in due}, not_yet.pk: "retrying"}


def test_it_drains_the_due_work_it_finds(workspace, sync_queue, frozen):
    """With the queue running the enqueued tasks, the sweep's nudges process every due operation."""
    for n in range(3):
        submit_brief(workspace, request_id=f"R-{n}")

    sweep()

    assert set(Operation.objects.values_list("state", flat=True)) == {"succeeded"}
    assert ReviewDraft.objects.count() == 3


def test_it_does_not_nudge_for_paused_work(workspace, frozen):
    """Held operations are not due; resuming re-drives them, not the sweep."""
    submit_brief(workspace)
    set_paused(paused=True, actor="alice", reason="incident", workspace=workspace)
    OrmQ.objects.all().delete()

    report = sweep()

    assert (report.due, report.nudges) == (0, 0)
    assert OrmQ.objects.count() == 0


def test_it_records_a_heartbeat_on_every_run(workspace, frozen):
    """The ledger's own liveness signal: when the sweep last ran and what it found."""
    submit_brief(workspace)

    sweep(now=START + timedelta(seconds=30))
    sweep(now=START + timedelta(seconds=90))

    heartbeat = Heartbeat.objects.get(name="sweep")
    assert heartbeat.beat_at == START + timedelta(seconds=90)
    assert heartbeat.detail == {
        "leases_expired": 0,
        "deadlines_passed": 0,
        "approvals_expired": 0,
        "versions_missing": 0,
        "bulk_actions_stalled": 0,
        "due": 1,
        "nudges": 1,
        "oldest_due_seconds": 90.0,
        "sampled": True,
        "audit_partitions_created": [],  # the migration made them
        "operation_partitions_created": [],  # likewise
    }


def test_it_is_safe_to_run_twice(workspace, frozen):
    """A second sweep finds the expired lease already handled and changes nothing."""
    operation = submit_brief(workspace)
    claim_due_operations(limit=10, worker="dead")

    first = sweep(now=LATER)
    second = sweep(now=LATER)

    assert (first.leases_expired, second.leases_expired) == (1, 0)
    assert AuditEvent.objects.filter(operation=operation, kind="lease_expired").count() == 1


def test_it_runs_from_the_command_line(workspace, frozen):
    """`manage.py sweep` prints the report as JSON."""
    submit_brief(workspace)
    out = StringIO()
    call_command("sweep", stdout=out)

    assert json.loads(out.getvalue()) == {
        "leases_expired": 0,
        "deadlines_passed": 0,
        "approvals_expired": 0,
        "versions_missing": 0,
        "bulk_actions_stalled": 0,
        "due": 1,
        "nudges": 1,
        "oldest_due_seconds": 0.0,
        "sampled": True,
        "audit_partitions_created": [],  # the migration made them
        "operation_partitions_created": [],  # likewise
    }


def test_it_keeps_the_leases_of_a_slow_batch_so_the_sweep_leaves_them_alone(workspace, scripted_action, frozen):
    """Each external call takes 40 s of a 60 s lease: without renewal, the third operation's claim
    would have expired while the batch was still working through the first two."""
    action = scripted_action(external=True)

    def slow_success(operation):
        frozen.shift(40)
        sweep()  # the sweep runs meanwhile, as it would every minute
        return Success(result={"sent": True})

    action.destination.answer(slow_success, slow_success, slow_success)
    operations = [submit(workspace, action.name, request_id=f"R-{n}") for n in range(3)]

    process_due_operations(worker="w1")

    for operation in operations:
        operation.refresh_from_db()
    assert [operation.state for operation in operations] == ["succeeded"] * 3
    assert not AuditEvent.objects.filter(kind__in=["lease_expired", "stale_completion_refused"]).exists()
    assert [fencing for _, fencing in action.destination.calls] == [1, 1, 1]
