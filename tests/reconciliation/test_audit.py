"""The reconciliation audit compares the ledger and the destination both ways over a window:
a succeeded operation without its record, a record of ours without a succeeded operation, and a
record whose content differs, each recorded once as a Mismatch; against the real stand-in."""

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from ledger.actions import http
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, Operation
from reconciliation.models import Mismatch, ReconciliationRun
from reconciliation.two_way_audit import RESET_MIN_OPERATIONS, run_audit
from tests.conftest import external_event


def succeeded(workspace, action, request_id) -> Operation:
    result = submit_event(
        workspace=workspace,
        raw=external_event(action, delivery_id=f"d-{request_id}", request_id=request_id),
        source="api",
    )
    process_due_operations(worker="w1")
    operation = Operation.objects.get(pk=result.operation.pk)
    assert operation.state == "succeeded", operation.last_error_message
    return operation


def settle(time_machine, minutes=1):
    """Past the actions' settle time, so what just happened is inside the audit's window."""
    time_machine.move_to(timezone.now() + timedelta(minutes=minutes))


def delete_record(standin, record_id):
    standin.http.post("/_delete", json={"id": record_id}).raise_for_status()


def edit_record(standin, record_id, payload):
    standin.http.post("/_edit", json={"id": record_id, "payload": payload}).raise_for_status()


@pytest.fixture
def history(workspace, standin, time_machine):
    """Three succeeded operations at the stand-in, one per ambiguity policy and one more."""
    return {
        "ticket": succeeded(workspace, "file-ticket", "R-1"),
        "notice": succeeded(workspace, "send-notice", "R-2"),
        "other": succeeded(workspace, "send-notice", "R-3"),
    }


def found(run):
    return sorted((m.kind, m.reference, m.record_id) for m in Mismatch.objects.filter(run=run))


def test_a_clean_history_finds_nothing(history, standin, time_machine):
    settle(time_machine)

    run = run_audit()

    assert run.status == "succeeded", run.error
    assert (run.missing_at_destination, run.unknown_to_ledger, run.content_differs, run.new_mismatches) == (0, 0, 0, 0)
    assert run.operations_checked == 3
    assert run.records_seen == 3
    assert not Mismatch.objects.exists()


def test_it_finds_one_planted_record_of_each_kind(workspace, history, standin, time_machine):
    ticket, notice = history["ticket"], history["notice"]
    delete_record(standin, ticket.external_id)
    edit_record(standin, notice.external_id, {"summary": "Changed at the destination", "owner": "ops"})
    stranger = standin.create("demo:R-9:v1:send-notice", {"summary": "Not sent by us", "owner": "ops"})
    standin.create("elsewhere:R-9:v1:send-notice")  # not one of our workspaces: not ours
    standin.create("demo:R-9:v1:some-other-action")  # not an action's key: not ours
    settle(time_machine)

    run = run_audit()

    assert run.status == "succeeded", run.error
    assert found(run) == [
        ("content_differs", notice.key, notice.external_id),
        ("missing_at_destination", ticket.key, ""),
        ("unknown_to_ledger", "demo:R-9:v1:send-notice", stranger["id"]),
    ]
    assert (run.missing_at_destination, run.unknown_to_ledger, run.content_differs, run.new_mismatches) == (1, 1, 1, 3)
    differs = Mismatch.objects.get(kind="content_differs")
    assert differs.operation == notice
    assert differs.evidence == {"record_id": notice.external_id, "fields": ["summary"]}
    assert "Changed at the destination" not in json.dumps(differs.evidence)  # names, never values
    unknown = Mismatch.objects.get(kind="unknown_to_ledger")
    assert (unknown.operation, unknown.workspace, unknown.status) == (None, workspace, "open")
    assert Mismatch.objects.get(kind="missing_at_destination").operation == ticket
    events = AuditEvent.objects.filter(kind="mismatch_found", actor="reconciliation-audit")
    assert events.count() == 3
    assert "Changed" not in " ".join(events.values_list("message", flat=True))


def test_a_sensitive_field_that_differs_is_named_not_shown(workspace, standin, time_machine):
    welcome = submit_event(
        workspace=workspace,
        source="api",
        raw={
            "action": "send-welcome",
            "delivery_id": "w-1",
            "data": {"email": "ann@example.com", "version": 1, "language": "en"},
        },
    ).operation
    process_due_operations(worker="w1")
    welcome.refresh_from_db()
    edit_record(standin, welcome.external_id, {"email": "someone@example.com", "language": "en"})
    settle(time_machine)

    run = run_audit()

    [mismatch] = Mismatch.objects.filter(run=run)
    assert mismatch.evidence == {"record_id": welcome.external_id, "fields": ["email"]}
    assert "example.com" not in json.dumps(mismatch.evidence)


def test_a_record_of_an_operation_that_did_not_succeed_is_unknown_to_the_ledger(workspace, standin, time_machine):
    """Here the operation gave up (needs_review) while the destination holds its record; one still
    unknown is left to reconciliation, which is already asking about it."""
    standin.fail_next({"kind": "drop_after_commit"})
    operation = submit_event(workspace=workspace, raw=external_event("send-notice"), source="api").operation
    process_due_operations(worker="w1")
    operation.refresh_from_db()
    assert operation.state == "unknown"
    settle(time_machine)
    assert run_audit().new_mismatches == 0

    Operation.objects.filter(pk=operation.pk).update(state="needs_review")  # reconciliation gave up
    settle(time_machine)
    run = run_audit(since=timezone.now() - timedelta(hours=1))

    [mismatch] = Mismatch.objects.filter(run=run)
    [record] = standin.records()
    assert (mismatch.kind, mismatch.operation_id) == ("unknown_to_ledger", operation.pk)
    assert mismatch.record_id == record["id"]
    assert mismatch.evidence == {"record_id": record["id"], "operation_state": "needs_review"}


def test_a_record_created_before_the_window_is_still_found_by_its_key(workspace, standin, time_machine):
    """An operation that succeeded inside the window may have its record from long before (found by
    reconciliation later): it is looked up by key, not called missing."""
    standin.fail_next({"kind": "drop_after_commit"})
    operation = submit_event(workspace=workspace, raw=external_event("send-notice"), source="api").operation
    process_due_operations(worker="w1")
    settle(time_machine, minutes=120)
    [record] = standin.records()
    Operation.objects.filter(pk=operation.pk).update(
        state="succeeded", external_id=record["id"], updated_at=timezone.now()
    )
    settle(time_machine)

    run = run_audit(since=timezone.now() - timedelta(minutes=30))

    assert run.status == "succeeded"
    assert (run.operations_checked, run.records_seen, run.new_mismatches) == (1, 0, 0)


def test_a_second_run_does_not_record_an_open_mismatch_again(history, standin, time_machine):
    delete_record(standin, history["ticket"].external_id)
    settle(time_machine)
    first = run_audit()

    settle(time_machine)
    second = run_audit(since=first.since)

    assert (first.missing_at_destination, first.new_mismatches) == (1, 1)
    assert (second.missing_at_destination, second.new_mismatches) == (1, 0)
    assert Mismatch.objects.count() == 1

    Mismatch.objects.update(status="acknowledged", decided_by="alice", decided_at=timezone.now())
    third = run_audit(since=first.since)
    assert third.new_mismatches == 1  # once closed, finding it again is news
    assert Mismatch.objects.filter(status="open").count() == 1


def test_the_window_starts_where_the_previous_successful_run_ended(history, standin, time_machine):
    settle(time_machine)
    first = run_audit()
    assert first.until - first.since == timedelta(hours=24)
    assert first.until == first.started_at - timedelta(seconds=30)  # the actions' settle time

    settle(time_machine, minutes=60)
    second = run_audit()

    assert second.since == first.until
    assert second.operations_checked == 0  # the three were audited by the first run


def test_the_run_records_its_counts_and_duration(history, standin, time_machine):
    settle(time_machine)

    run = run_audit()

    run.refresh_from_db()
    assert run.status == "succeeded"
    assert run.error == ""
    assert run.finished_at >= run.started_at
    assert run.duration == run.finished_at - run.started_at


def test_a_destination_that_fails_during_the_audit_fails_the_run_and_records_no_mismatch(
    history, standin, time_machine
):
    """The listing answers, one finding is made, then the lookup that would confirm a missing
    record fails: nothing of the run is kept but its failure and the error."""
    delete_record(standin, history["ticket"].external_id)
    edit_record(standin, history["notice"].external_id, {"summary": "Changed", "owner": "ops"})
    settle(time_machine)
    standin.fail_next_lookup({"kind": "delay", "seconds": 0}, {"kind": "status", "status": 503})

    run = run_audit()

    run.refresh_from_db()
    assert run.status == "failed"
    assert "HTTP 503" in run.error
    assert run.finished_at is not None
    assert (run.missing_at_destination, run.content_differs, run.new_mismatches) == (0, 0, 0)
    assert not Mismatch.objects.exists()
    assert not AuditEvent.objects.filter(kind="mismatch_found").exists()


def test_a_failed_listing_fails_the_run(history, standin, time_machine):
    settle(time_machine)
    standin.fail_next_lookup({"kind": "reset_before"})

    run = run_audit()

    assert run.status == "failed"
    assert "no answer" in run.error
    assert not Mismatch.objects.exists()


def test_a_failed_run_does_not_move_the_next_window(history, standin, settings, time_machine):
    settle(time_machine)
    good = run_audit()
    settings.OPSCONSOLE_STANDIN_URL = "http://127.0.0.1:9"
    settle(time_machine)
    assert run_audit().status == "failed"

    settle(time_machine)
    settings.OPSCONSOLE_STANDIN_URL = standin.url
    assert run_audit().since == good.until


def test_a_destination_that_is_down_fails_the_run(history, standin, settings, time_machine):
    settings.OPSCONSOLE_STANDIN_URL = "http://127.0.0.1:9"  # nothing listens there
    settle(time_machine)

    run = run_audit()

    assert run.status == "failed"
    assert "did not reach" in run.error
    assert not Mismatch.objects.exists()


def test_the_command_prints_the_counts(history, standin, time_machine):
    delete_record(standin, history["ticket"].external_id)
    settle(time_machine)
    out = StringIO()

    call_command("reconcile", "--audit", stdout=out)

    printed = json.loads(out.getvalue())
    assert printed["status"] == "succeeded"
    assert (printed["missing_at_destination"], printed["unknown_to_ledger"], printed["content_differs"]) == (1, 0, 0)
    assert printed["operations_checked"] == 3
    assert printed["run"] == ReconciliationRun.objects.get().pk


def test_the_command_takes_a_window_start(history, standin, time_machine):
    settle(time_machine)
    since = timezone.now() - timedelta(hours=2)
    out = StringIO()

    call_command("reconcile", "--audit", "--since", since.isoformat(), stdout=out)

    assert ReconciliationRun.objects.get().since == since


@pytest.mark.parametrize(
    ("since", "message"),
    [
        ("yesterday", "is not a date and time"),
        ("2030-02-30T00:00:00+00:00", "is not a date and time"),
        ("2030-01-01T00:00:00", "has no UTC offset"),
        ("2999-01-01T00:00:00+00:00", "Nothing to audit"),
    ],
)
def test_the_command_refuses_a_bad_window_start(db, since, message):
    with pytest.raises(CommandError, match=message):
        call_command("reconcile", "--audit", "--since", since, stdout=StringIO())
    assert not ReconciliationRun.objects.exists()


def test_since_needs_the_audit(db):
    with pytest.raises(CommandError, match="--since applies to the audit only"):
        call_command("reconcile", "--since", "2030-01-01T00:00:00+00:00", stdout=StringIO())


def test_a_failed_audit_fails_the_command(history, standin, settings, time_machine):
    settings.OPSCONSOLE_STANDIN_URL = "http://127.0.0.1:9"
    settle(time_machine)
    out = StringIO()

    with pytest.raises(CommandError, match="The audit failed"):
        call_command("reconcile", "--audit", stdout=out)
    assert json.loads(out.getvalue())["status"] == "failed"


def test_the_audit_is_scheduled_hourly(db):
    """Migration 0002 creates the schedule; ensuring it again keeps one."""
    from django_q.models import Schedule

    from ledger.engine.schedules import AUDIT_SCHEDULE, ensure_audit_schedule

    ensure_audit_schedule(Schedule)
    ensure_audit_schedule(Schedule)

    [schedule] = Schedule.objects.filter(name=AUDIT_SCHEDULE)
    assert (schedule.func, schedule.args, schedule.schedule_type, schedule.minutes) == (
        "reconciliation.tasks.audit",
        None,
        Schedule.MINUTES,
        60,
    )


def test_the_scheduled_task_runs_the_audit_and_skips_an_empty_window(history, standin, time_machine):
    from reconciliation import tasks

    time_machine.move_to(timezone.now() + timedelta(minutes=1), tick=False)
    done = tasks.audit()
    assert done == {"run": ReconciliationRun.objects.get().pk, "status": "succeeded"}

    skipped = tasks.audit()  # at once again: the window would be empty
    assert skipped["status"] == "skipped"
    assert "Nothing to audit" in skipped["reason"]
    assert ReconciliationRun.objects.count() == 1


def many_succeeded(workspace, count, *, action="send-notice", prefix="M"):
    for number in range(count):
        submit_event(
            workspace=workspace,
            raw=external_event(action, delivery_id=f"d-{prefix}{number}", request_id=f"{prefix}-{number}"),
            source="api",
        )
    while process_due_operations(worker="w1"):
        pass
    operations = Operation.objects.filter(key__contains=f":{prefix}-")
    assert set(operations.values_list("state", flat=True)) == {"succeeded"}
    return list(operations)


def test_a_destination_reset_after_successes_is_one_finding_not_one_per_record(workspace, standin, time_machine):
    """The stand-in restarted empty (POST /_reset) after 25 successes: the listing holds none of
    them, so the audit raises one destination_reset with the numbers, no missing_at_destination,
    and asks for no record by key (a reset would answer each "absent")."""
    many_succeeded(workspace, count=RESET_MIN_OPERATIONS + 5)
    standin.http.post("/_reset").raise_for_status()
    settle(time_machine)

    run = run_audit()

    assert run.status == "succeeded", run.error
    assert (run.missing_at_destination, run.destination_reset, run.new_mismatches) == (0, 1, 1)
    [reset] = Mismatch.objects.all()
    assert (reset.kind, reset.workspace, reset.operation, reset.action) == ("destination_reset", workspace, None, "")
    assert reset.reference == reset.destination == http.origin(standin.url)
    assert reset.evidence == {"unlisted": 25, "succeeded": 25, "records_listed": 0, "actions": ["send-notice"]}
    [event] = AuditEvent.objects.filter(kind="mismatch_found")
    assert "lists none of the 25 records the ledger holds for this window: was it reset?" in event.message


def test_a_reset_finding_is_not_raised_again_while_it_is_open(workspace, standin, time_machine):
    many_succeeded(workspace, count=RESET_MIN_OPERATIONS)
    standin.http.post("/_reset").raise_for_status()
    settle(time_machine)
    first = run_audit()

    second = run_audit(since=first.since)

    assert (first.new_mismatches, second.destination_reset, second.new_mismatches) == (1, 1, 0)
    assert Mismatch.objects.count() == 1


def test_records_listed_after_a_reset_are_still_compared(workspace, standin, time_machine):
    """Two records survive a loss of 20 of 22: their content is still judged, one by one."""
    operations = many_succeeded(workspace, count=RESET_MIN_OPERATIONS + 2)
    kept = operations[:2]
    for operation in operations[2:]:
        delete_record(standin, operation.external_id)
    edit_record(standin, kept[0].external_id, {"summary": "Changed at the destination", "owner": "ops"})
    settle(time_machine)

    run = run_audit()

    assert found(run) == [
        ("content_differs", kept[0].key, kept[0].external_id),
        ("destination_reset", Mismatch.objects.get(kind="destination_reset").destination, ""),
    ]
    assert Mismatch.objects.get(kind="destination_reset").evidence["unlisted"] == RESET_MIN_OPERATIONS


def test_a_loss_below_the_threshold_is_one_finding_per_record(workspace, standin, time_machine):
    """3 of 22 records gone is a loss, not a reset: each is looked up and found missing."""
    operations = many_succeeded(workspace, count=RESET_MIN_OPERATIONS + 2)
    for operation in operations[:3]:
        delete_record(standin, operation.external_id)
    settle(time_machine)

    run = run_audit()

    assert (run.missing_at_destination, run.destination_reset) == (3, 0)
    assert sorted(Mismatch.objects.values_list("reference", flat=True)) == sorted(op.key for op in operations[:3])
    assert set(Mismatch.objects.values_list("destination", flat=True)) == {http.origin(standin.url)}


def test_a_few_successes_all_gone_are_each_their_own_finding(workspace, standin, time_machine):
    """Under RESET_MIN_OPERATIONS a wiped destination's records are few enough to read one by one."""
    many_succeeded(workspace, count=3)
    standin.http.post("/_reset").raise_for_status()
    settle(time_machine)

    run = run_audit()

    assert (run.missing_at_destination, run.destination_reset) == (3, 0)


def test_a_reset_in_one_workspace_leaves_another_workspaces_lost_record_its_own_finding(
    workspace, standin, time_machine
):
    """Whether a destination was reset is judged per workspace: another tenant's one lost record of
    two is not folded into a "was it reset?" of numbers that names no record."""
    from ledger.core import accounts

    many_succeeded(workspace, count=RESET_MIN_OPERATIONS + 5)
    standin.http.post("/_reset").raise_for_status()
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    lost, kept = many_succeeded(other, count=2, prefix="B")
    delete_record(standin, lost.external_id)
    settle(time_machine)

    run = run_audit()

    assert run.status == "succeeded", run.error
    [reset] = Mismatch.objects.filter(kind="destination_reset")
    assert (reset.workspace, reset.evidence["unlisted"], reset.evidence["succeeded"]) == (workspace, 25, 25)
    [missing] = Mismatch.objects.filter(workspace=other)
    assert (missing.kind, missing.reference) == ("missing_at_destination", lost.key)
    assert (run.missing_at_destination, run.destination_reset) == (1, 1)
