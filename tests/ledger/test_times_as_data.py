"""Times are data, not text: a stored text that mentions a time says ``{name}`` and keeps
the time beside it, in UTC (``ledger.timed``: ``AuditEvent.times``, ``Operation.last_error_times``),
so each reader writes it in its own zone. No flow that used to write a clock time into a message
writes one any more; an event's times are covered by its hash; rows of before read as they were."""

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.db import connection

from ledger import retention, timed
from ledger.core import audit_mac, audit_verify
from ledger.core.rows import model_row
from ledger.core.transitions import record_audit_event
from ledger.engine.lookups import ask_destination
from ledger.engine.processing import process_due_operations
from ledger.models import AuditEvent, Operation
from ledger.outcomes import Absent, AmbiguousError, CannotTell, TransientError
from reconciliation.reconcile import reconcile_operation
from tests.ledger.conftest import START, submit, submit_brief
from tests.ledger.engine.test_destination_limits import limited
from tests.ledger.engine.test_processing_concurrency import submit_many

# A clock time or a date written as words: what no stored message may hold any more.
WRITTEN_TIME = re.compile(r"\d{1,2}:\d\d|\d{4}-\d\d-\d\d|UTC")


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def open_the_breaker(workspace, scripted_action):
    """Two transient failures open a 30 s breaker; the three operations claimed with them are held."""
    action = limited(scripted_action, breaker_threshold=2, breaker_cooldown=timedelta(seconds=30))
    action.destination.answer(TransientError("HTTP 503"), TransientError("HTTP 503"))
    submit_many(workspace, action, 5)
    process_due_operations(worker="w1")
    return action


def spend_the_retry_budget(workspace, scripted_action) -> Operation:
    """One retry per hour: the second failure waits for the budget, an hour after the first."""
    workspace.retry_budget_per_hour = 1
    workspace.save()
    action = scripted_action(backoff_base_seconds=1.0, backoff_cap_seconds=10.0)
    action.destination.answer(TransientError("busy"), TransientError("busy"))
    submit(workspace, action.name, request_id="B-1")
    second = submit(workspace, action.name, request_id="B-2")
    process_due_operations(worker="w1")
    second.refresh_from_db()
    return second


def fail_a_lookup(workspace, scripted_action, frozen) -> tuple[Operation, datetime]:
    """A try that may have landed, then a lookup that cannot tell: asked again later."""
    action = scripted_action(external=True, settle_after=timedelta(seconds=10))
    action.destination.answer(AmbiguousError("read timeout"))
    action.lookup = lambda operation: CannotTell("HTTP 503 from the destination")
    operation = submit(workspace, action.name, request_id="L-1")
    process_due_operations(worker="w1")
    operation.refresh_from_db()
    assert operation.state == "unknown"
    frozen.move_to(START + timedelta(seconds=20), tick=False)
    now = START + timedelta(seconds=20)
    assert reconcile_operation(operation, now=now) == "cannot_tell"
    return operation, now


def purge(workspace) -> datetime:
    brief = submit_brief(workspace, request_id="P-1")
    Operation.objects.filter(pk=brief.pk).update(state="succeeded")
    as_of = START + timedelta(days=400)
    retention.purge(as_of=as_of, vacuum=False)
    return as_of


def test_a_failed_lookup_keeps_its_next_lookup_and_give_up_times_as_data(workspace, scripted_action, frozen, settings):
    settings.OPSCONSOLE_RECONCILE_GIVE_UP_SECONDS = 3600
    operation, now = fail_a_lookup(workspace, scripted_action, frozen)

    event = AuditEvent.objects.get(kind="lookup_failed")
    assert event.message == (
        "lookup 1 could not tell (HTTP 503 from the destination); "
        "next lookup at {next_lookup}, gives up at {give_up_at}"
    )
    operation.refresh_from_db()
    assert event.times == {"next_lookup": iso(operation.next_attempt_at), "give_up_at": iso(START + timedelta(hours=1))}
    assert timed.as_iso(event.message, event.times).endswith(
        f"next lookup at {operation.next_attempt_at.isoformat(timespec='seconds')}, "
        "gives up at 2030-01-07T10:00:00+00:00"
    )


def test_the_breaker_keeps_until_when_calls_wait_as_data(workspace, scripted_action, frozen):
    action = open_the_breaker(workspace, scripted_action)

    until = iso(START + timedelta(seconds=30))
    opened = AuditEvent.objects.get(kind="breaker_opened")
    assert (opened.message, opened.times) == (
        f"calls to {action.name} paused until {{paused_until}} (circuit breaker)",
        {"paused_until": until},
    )
    held = AuditEvent.objects.filter(kind="held")
    assert held.count() == 3
    assert {event.times["paused_until"] for event in held} == {until}
    for operation in Operation.objects.filter(state="retrying", attempts=0):
        assert operation.last_error_times == {"paused_until": until}


def test_a_lookup_not_made_or_not_believed_says_why_without_a_clock_time(workspace, scripted_action, frozen):
    action = scripted_action(external=True, settle_after=timedelta(seconds=30))
    action.destination.answer(AmbiguousError("read timeout"))
    action.lookup = lambda operation: Absent()
    operation = submit(workspace, action.name, request_id="S-1")
    process_due_operations(worker="w1")

    answer = ask_destination(operation, action)

    assert answer == CannotTell("no record yet, but the last request may still land (within 30s of the try's start)")


def test_no_stored_message_holds_a_written_time_after_the_flows_that_wrote_one(
    workspace, scripted_action, frozen, settings
):
    """Circuit breaker (opened, held), spent retry budget, failed lookup, purge: every message they
    stored, and every operation's last error, holds its times beside it, none in its words."""
    settings.OPSCONSOLE_RECONCILE_GIVE_UP_SECONDS = 3600
    open_the_breaker(workspace, scripted_action)
    spend_the_retry_budget(workspace, scripted_action)
    fail_a_lookup(workspace, scripted_action, frozen)
    as_of = purge(workspace)

    kinds_with_times = set(AuditEvent.objects.filter(times__isnull=False).values_list("kind", flat=True))
    assert {"breaker_opened", "held", "retry_scheduled", "lookup_failed", "purged"} <= kinds_with_times
    messages = list(AuditEvent.objects.values_list("kind", "message"))
    messages += [("last error", text) for text in Operation.objects.values_list("last_error_message", flat=True)]
    assert [(kind, text) for kind, text in messages if WRITTEN_TIME.search(text)] == []
    purged = AuditEvent.objects.get(kind="purged")
    assert purged.message.startswith("as of {as_of}: ")
    assert purged.times == {"as_of": iso(as_of)}
    # Every chain still verifies, the events with times among them.
    assert audit_verify.verify_chains().broken is None


def test_an_events_times_are_covered_by_its_hash(workspace):
    event = record_audit_event(
        actor="test",
        kind="lookup_failed",
        workspace=workspace,
        message="next lookup at {next_lookup}",
        times=timed.kept(next_lookup=START),
    )
    assert audit_verify.verify_chains().broken is None

    with connection.cursor() as cursor:
        # As the database's owner, triggers off: the time moved an hour, the words untouched.
        cursor.execute(
            "SET LOCAL session_replication_role = replica; UPDATE ledger_auditevent SET times = %s WHERE id = %s",
            ['{"next_lookup": "2030-01-07T10:00:00+00:00"}', event.pk],
        )

    broken = audit_verify.verify_chains().broken
    assert (broken.event_id, broken.problem) == (event.pk, "was changed after it was written")


def test_an_event_without_times_hashes_as_events_did_before(workspace):
    """Events written before times were kept apart (no times) keep verifying: their encoding is the
    one they were hashed with."""
    event = record_audit_event(actor="test", kind="paused", workspace=workspace, message="at 08:35:47 UTC")

    expected = "".join(
        f"{len(str(value).encode())}:{value}"
        for value in (
            event.prev_hash,
            workspace.pk,
            "",
            "",
            "test",
            "paused",
            "",
            "",
            "",
            "at 08:35:47 UTC",
            (event.created_at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1),
        )
    )
    assert audit_mac.encoding(model_row(event)) == expected.encode()
    assert audit_mac.digest(model_row(event), settings.OPSCONSOLE_AUDIT_KEY) == event.hash
    assert event.times is None


@pytest.mark.parametrize(
    ("words", "times", "expected"),
    [
        ("as of {as_of}", {"as_of": "2030-01-07T09:00:00+00:00"}, "as of 2030-01-07T09:00:00+00:00"),
        ("paused until 08:35:47 UTC", None, "paused until 08:35:47 UTC"),  # a text of before
        ('said {"a": 1} {other}', {"as_of": "2030-01-07T09:00:00+00:00"}, 'said {"a": 1} {other}'),
        ("{a}, {b}", timed.kept(a=START, b=START + timedelta(hours=1)), "2030-01-07T09:00:00+00:00, 10:00"),
    ],
)
def test_only_the_names_its_times_hold_are_filled(words, times, expected):
    assert timed.filled(words, times, timed.iso).replace("2030-01-07T10:00:00+00:00", "10:00") == expected


@pytest.mark.parametrize(
    ("duration", "words"),
    [
        (timedelta(minutes=30), "30 min"),
        (timedelta(days=2), "2 d"),
        (timedelta(minutes=90), "1 h 30 min"),
        (timedelta(seconds=90), "1 min 30 s"),
        (timedelta(0), "0 s"),
    ],
)
def test_a_promise_reads_in_the_words_of_the_wait_it_is_measured_against(duration, words):
    """Service level 30 min beside a wait of 28 min, not 30m beside 28 min."""
    assert timed.promised_text(duration) == words
