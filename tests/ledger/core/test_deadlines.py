"""Deadlines respect people: time held by a pause does not count against an operation's processing
deadline, a consequential operation's processing deadline starts when it is approved, and an
approval request expires on its own (``approval_window``) into needs_review."""

from datetime import timedelta

import pytest
from django.db import connection

from ledger.core.held_time import with_held_time
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_batch
from ledger.models import AuditEvent, Operation, PauseInterval
from ledger.people import approvals, replays
from ledger.people.pause import set_paused
from ledger.sweep import sweep
from tests.ledger.conftest import START, submit

DEADLINE = timedelta(minutes=5)


def owed_deadlines() -> dict:
    """Each operation's deadline with the held time it is owed given: what its next claim writes."""
    return {op.pk: op.held_deadline for op in with_held_time(Operation.objects.all())}


def stored_deadlines() -> dict:
    return dict(Operation.objects.values_list("pk", "deadline"))


@pytest.fixture
def action(scripted_action):
    return scripted_action(deadline=DEADLINE)


def test_it_runs_held_work_after_a_pause_longer_than_its_deadline(workspace, action, frozen):
    operation = submit(workspace, action.name)
    set_paused(paused=True, actor="alice", reason="vendor outage", workspace=workspace)

    frozen.move_to(START + timedelta(hours=2))
    report = sweep()

    assert report.deadlines_passed == 0  # held, not late
    assert Operation.objects.get().state == "pending"

    set_paused(paused=False, actor="alice", workspace=workspace)
    assert owed_deadlines() == {operation.pk: START + timedelta(hours=2) + DEADLINE}  # the two held hours
    assert stored_deadlines() == {operation.pk: START + DEADLINE}  # given at the claim, not written now
    assert AuditEvent.objects.get(kind="resumed").message == "workspace demo, held 2 h 0 min"
    frozen.move_to(START + timedelta(hours=2, minutes=1))
    assert sweep().deadlines_passed == 0
    assert process_due_operations() == 1
    assert Operation.objects.get().state == "succeeded"
    assert stored_deadlines() == {operation.pk: START + timedelta(hours=2) + DEADLINE}  # the claim wrote it


def test_it_gives_back_exactly_the_time_held(workspace, action, frozen):
    """Two minutes of the deadline had run before the pause: three remain after it."""
    early = submit(workspace, action.name, request_id="R-early")
    frozen.move_to(START + timedelta(minutes=2))
    set_paused(paused=True, actor="alice", reason="deploy")
    frozen.move_to(START + timedelta(minutes=4))
    during = submit(workspace, action.name, request_id="R-during")  # arrived while paused
    frozen.move_to(START + timedelta(minutes=30))

    set_paused(paused=False, actor="alice")

    deadlines = owed_deadlines()
    resumed = START + timedelta(minutes=30)
    assert deadlines[early.pk] == resumed + timedelta(minutes=3)
    assert deadlines[during.pk] == resumed + DEADLINE  # held from its arrival: its whole deadline is left


def test_it_never_gives_back_less_than_was_held_under_overlapping_pauses(workspace, action, frozen):
    operation = submit(workspace, action.name)
    set_paused(paused=True, actor="alice", reason="incident")  # global
    frozen.move_to(START + timedelta(hours=1))
    set_paused(paused=True, actor="bob", reason="incident, this workspace", workspace=workspace)
    frozen.move_to(START + timedelta(hours=2))
    set_paused(paused=False, actor="alice")  # still held by the workspace switch
    frozen.move_to(START + timedelta(hours=3))

    set_paused(paused=False, actor="bob", workspace=workspace)

    assert owed_deadlines()[operation.pk] >= START + timedelta(hours=3) + DEADLINE
    frozen.move_to(START + timedelta(hours=3, minutes=4))
    assert sweep().deadlines_passed == 0
    assert process_due_operations() == 1


def test_it_still_sends_unheld_late_work_to_review(workspace, action, scripted_action, frozen):
    """Only held work is spared: an operation of another action past its deadline still goes to review."""
    held = submit(workspace, action.name, request_id="R-held")
    other = scripted_action(deadline=DEADLINE)
    late = submit(workspace, other.name, request_id="R-late")
    set_paused(paused=True, actor="alice", reason="this action only", action=action.name)
    frozen.move_to(START + timedelta(hours=1))

    assert sweep().deadlines_passed == 1

    states = dict(Operation.objects.values_list("pk", "state"))
    assert (states[held.pk], states[late.pk]) == ("pending", "needs_review")


@pytest.fixture
def consequential(scripted_action):
    return scripted_action(consequential=True, deadline=DEADLINE, approval_window=timedelta(days=2))


def test_it_starts_the_processing_deadline_at_approval(workspace, consequential, approver, frozen):
    operation = submit(workspace, consequential.name)
    assert operation.deadline == START + timedelta(days=2)  # the approval request's expiry

    frozen.move_to(START + timedelta(days=1))  # long after the processing deadline would have passed
    approvals.approve_operation(operation, user=approver)

    operation.refresh_from_db()
    assert operation.deadline == START + timedelta(days=1) + DEADLINE
    assert sweep().deadlines_passed == 0
    assert process_due_operations() == 1
    assert Operation.objects.get().state == "succeeded"


def test_it_sends_an_expired_approval_request_to_review(workspace, consequential, approver, reviewer, frozen):
    operation = submit(workspace, consequential.name)
    frozen.move_to(START + timedelta(days=2) - timedelta(seconds=1))
    assert sweep().approvals_expired == 0

    frozen.move_to(START + timedelta(days=2))
    assert sweep().approvals_expired == 1

    operation.refresh_from_db()
    assert (operation.state, operation.last_error) == (
        "needs_review",
        {"category": "approval", "message": "approval expired"},
    )
    event = AuditEvent.objects.get(kind="approval_expired")
    assert (event.actor, event.from_state, event.to_state) == ("sweep", "pending_approval", "needs_review")
    with pytest.raises(approvals.ApprovalError, match="only an operation awaiting approval can be decided"):
        approvals.approve_operation(operation, user=approver)

    replays.replay_operation(operation, user=reviewer, reason="customer still wants it")
    operation.refresh_from_db()
    assert (operation.state, operation.deadline) == ("pending_approval", START + timedelta(days=4))


def test_a_resume_writes_no_operation_however_much_it_held(workspace, action, frozen):
    """O(1): the switch and its interval are written, not the held operations (no update, so no
    dead tuple in ledger_operation); each is given its time when it is claimed."""
    results = submit_batch(
        workspace=workspace,
        source="api",
        raw_events=[{"action": action.name, "data": {"request_id": f"R-{n}", "version": 1}} for n in range(200)],
    )
    assert {result.outcome for result in results} == {"accepted"}
    set_paused(paused=True, actor="alice", reason="vendor outage")
    frozen.move_to(START + timedelta(hours=1))
    before = updated_rows_of("ledger_operation")

    set_paused(paused=False, actor="alice")

    assert updated_rows_of("ledger_operation") == before
    assert set(owed_deadlines().values()) == {START + timedelta(hours=1) + DEADLINE}
    assert PauseInterval.objects.get().ended_at == START + timedelta(hours=1)
    while process_due_operations():  # a batch at a time
        pass
    assert set(Operation.objects.values_list("state", flat=True)) == {"succeeded"}
    assert set(stored_deadlines().values()) == {START + timedelta(hours=1) + DEADLINE}


def test_work_that_came_back_after_a_pause_is_not_given_its_time(workspace, action, frozen):
    """Held time goes to what the pause held: an operation whose state moved after the release (a
    retry of a try that was running through the pause) keeps its deadline as it is."""
    operation = submit(workspace, action.name)
    set_paused(paused=True, actor="alice", reason="deploy")
    frozen.move_to(START + timedelta(minutes=2))
    set_paused(paused=False, actor="alice")
    frozen.move_to(START + timedelta(minutes=3))
    Operation.objects.filter(pk=operation.pk).update(state_changed_at=START + timedelta(minutes=3))

    assert owed_deadlines() == {operation.pk: START + DEADLINE}
    frozen.move_to(START + DEADLINE)
    assert sweep().deadlines_passed == 1


def updated_rows_of(table: str) -> int:
    """Rows of ``table`` this transaction updated so far (the test's transaction: PostgreSQL's
    own count, which every UPDATE, HOT or not, adds to)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_get_xact_tuples_updated(%s::regclass)", [table])
        return cursor.fetchone()[0]
