"""Reconciliation asks the destination about every unknown operation before anything is sent
again: found -> succeeded, confirmed absent -> retried under the same reference, cannot tell ->
asked again with backoff, and a person only once asking again has stopped helping. Against a real
HTTP destination (the stand-in)."""

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone
from django_q.models import OrmQ

from ledger.actions import get_action
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import Attempt, AuditEvent, Heartbeat, Operation
from reconciliation.reconcile import reconcile_operation, reconcile_unknown_operations
from tests.conftest import external_event

SETTLE = get_action("send-notice").settle_after


def unknown_operation(workspace, standin, fault) -> Operation:
    standin.fail_next(fault)
    result = submit_event(workspace=workspace, raw=external_event("send-notice"), source="api")
    process_due_operations(worker="w1")
    operation = Operation.objects.get(pk=result.operation.pk)
    assert operation.state == "unknown"
    return operation


def settled(time_machine):
    time_machine.move_to(timezone.now() + SETTLE + timedelta(seconds=1))


def test_it_waits_while_a_request_may_still_land(workspace, standin):
    operation = unknown_operation(workspace, standin, {"kind": "reset_before"})

    assert reconcile_operation(operation) == "settling"

    operation.refresh_from_db()
    assert operation.state == "unknown"
    assert standin.requests("GET /records") == 0


def test_it_records_success_when_the_destination_has_the_record(workspace, standin, time_machine):
    operation = unknown_operation(workspace, standin, {"kind": "drop_after_commit"})
    [record] = standin.records()
    settled(time_machine)

    report = reconcile_unknown_operations()

    operation.refresh_from_db()
    assert (report.found, operation.state, operation.external_id) == (1, "succeeded", record["id"])
    assert operation.result == {"record_id": record["id"]}
    event = AuditEvent.objects.get(kind="reconciled_found")
    assert (event.actor, event.from_state, event.to_state) == ("reconciler", "unknown", "succeeded")
    assert standin.records() == [record]
    assert standin.requests() == 1


def test_it_sends_again_once_the_destination_confirms_it_has_nothing(
    workspace, standin, time_machine, django_capture_on_commit_callbacks
):
    operation = unknown_operation(workspace, standin, {"kind": "reset_before"})
    settled(time_machine)
    OrmQ.objects.all().delete()  # intake's wake-up and the first lookup's nudge

    with django_capture_on_commit_callbacks(execute=True):
        report = reconcile_unknown_operations()

    operation.refresh_from_db()
    assert (report.absent, operation.state) == (1, "retrying")
    assert OrmQ.objects.count() == 1  # the nudge, sent once the verdict committed
    process_due_operations(worker="w2")
    operation.refresh_from_db()
    [record] = standin.records()
    assert (operation.state, operation.external_id) == ("succeeded", record["id"])


def test_it_keeps_asking_with_backoff_while_the_destination_cannot_answer(
    workspace, standin, settings, time_machine, django_capture_on_commit_callbacks
):
    """A destination that is briefly down does not bring a person in: the operation stays unknown,
    each failed lookup is audited and the next one is scheduled (and nudged) with backoff."""
    operation = unknown_operation(workspace, standin, {"kind": "reset_before"})
    settled(time_machine)
    standin.fail_next_lookup({"kind": "status", "status": 503}, {"kind": "status", "status": 503})
    first = timezone.now()
    OrmQ.objects.all().delete()  # intake's wake-up

    with django_capture_on_commit_callbacks(execute=True):
        assert reconcile_operation(operation, now=first) == "cannot_tell"

    operation.refresh_from_db()
    assert (operation.state, operation.next_attempt_at) == ("unknown", first + timedelta(seconds=30))
    assert operation.last_error["message"].startswith("lookup 1 failed: lookup failed: HTTP 503")
    [nudge] = OrmQ.objects.all()
    assert nudge.lock == operation.next_attempt_at  # delivered when the next lookup is due
    assert reconcile_operation(operation, now=first + timedelta(seconds=29)) == "not_due"

    assert reconcile_operation(operation, now=first + timedelta(seconds=30)) == "cannot_tell"
    operation.refresh_from_db()
    assert operation.next_attempt_at == first + timedelta(seconds=90)  # waited 30 s, then 60 s
    failed = list(AuditEvent.objects.filter(kind="lookup_failed").values_list("actor", "message"))
    assert [actor for actor, _ in failed] == ["reconciler", "reconciler"]
    assert "lookup 2 could not tell (lookup failed: HTTP 503" in failed[1][1]
    assert standin.requests("GET /records") == 2


def test_it_succeeds_without_review_when_a_lookup_fails_twice_then_answers(workspace, standin, time_machine):
    operation = unknown_operation(workspace, standin, {"kind": "drop_after_commit"})
    [record] = standin.records()
    settled(time_machine)
    standin.fail_next_lookup({"kind": "status", "status": 503}, {"kind": "reset_before"})
    now = timezone.now()

    verdicts = [reconcile_unknown_operations(now=now + timedelta(seconds=s)) for s in (0, 30, 90)]

    assert [(r.cannot_tell, r.found, r.gave_up) for r in verdicts] == [(1, 0, 0), (1, 0, 0), (0, 1, 0)]
    operation.refresh_from_db()
    assert (operation.state, operation.external_id, operation.last_error) == ("succeeded", record["id"], None)
    assert not AuditEvent.objects.filter(operation=operation, to_state="needs_review").exists()
    assert list(
        AuditEvent.objects.filter(operation=operation, kind__in=["lookup_failed", "reconciled_found"]).values_list(
            "kind", flat=True
        )
    ) == ["lookup_failed", "lookup_failed", "reconciled_found"]
    assert standin.requests() == 1  # nothing was sent again


def test_it_asks_a_person_once_the_give_up_time_has_passed(workspace, standin, settings, time_machine):
    settings.OPSCONSOLE_RECONCILE_GIVE_UP_SECONDS = 120
    operation = unknown_operation(workspace, standin, {"kind": "reset_before"})
    began = Attempt.objects.get().started_at
    settings.OPSCONSOLE_STANDIN_URL = "http://127.0.0.1:9"  # the destination went away
    settled(time_machine)

    schedule = []
    for _ in range(10):
        verdict = reconcile_operation(operation, now=max(timezone.now(), operation.next_attempt_at))
        schedule.append((verdict, operation.next_attempt_at))
        if verdict == "gave_up":
            break

    assert [verdict for verdict, _ in schedule] == ["cannot_tell", "cannot_tell", "gave_up"]
    # The last lookup is made exactly at the give-up time, never after it.
    assert schedule[1][1] == began + timedelta(seconds=120)
    operation.refresh_from_db()
    assert operation.state == "needs_review"
    assert operation.last_error["category"] == "unknown"
    assert operation.last_error["message"].startswith("reconciliation: gave up after 3 lookups: lookup failed")


def test_it_asks_a_person_when_several_records_carry_the_key(workspace, standin, time_machine):
    operation = unknown_operation(workspace, standin, {"kind": "drop_after_commit"})
    standin.create(operation.key)
    settled(time_machine)

    assert reconcile_operation(operation) == "gave_up"  # asking again cannot help: a person must look

    operation.refresh_from_db()
    assert operation.state == "needs_review"
    assert "2 records carry this key" in operation.last_error["message"]


def test_it_changes_nothing_when_the_operation_moved_meanwhile(workspace, standin, time_machine):
    operation = unknown_operation(workspace, standin, {"kind": "drop_after_commit"})
    settled(time_machine)
    Operation.objects.filter(pk=operation.pk).update(state="needs_review")

    reconcile_operation(operation)

    assert Operation.objects.get(pk=operation.pk).state == "needs_review"
    assert not AuditEvent.objects.filter(kind="reconciled_found").exists()


@pytest.mark.django_db
def test_it_records_a_heartbeat_and_runs_from_the_command_line():
    out = StringIO()
    call_command("reconcile", stdout=out)

    assert json.loads(out.getvalue()) == {
        "found": 0,
        "absent": 0,
        "cannot_tell": 0,
        "gave_up": 0,
        "settling": 0,
        "not_due": 0,
    }
    assert Heartbeat.objects.filter(name="reconcile").exists()
