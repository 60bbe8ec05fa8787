"""The retry schedule: exponential ceilings with full jitter and a cap, never before Retry-After,
and an operation that keeps failing reaches needs_review exactly at its attempt limit."""

from datetime import timedelta

import time_machine
from django.db import transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.core.retry import backoff_ceiling, retry_delay
from ledger.engine.claiming import claim_due_operations
from ledger.engine.processing import process_due_operations
from ledger.models import Attempt, AuditEvent, Operation
from ledger.outcomes import TransientError
from tests.ledger.conftest import START, submit

# Mostly attempts below the cap, where a wrong exponent or jitter shows, plus some far beyond it.
attempts = st.one_of(st.integers(min_value=0, max_value=16), st.integers(min_value=0, max_value=200))
bases = st.floats(min_value=0.001, max_value=3600, allow_nan=False, allow_infinity=False)
caps = st.floats(min_value=0, max_value=86_400, allow_nan=False, allow_infinity=False)
unit = st.floats(min_value=0, max_value=1, exclude_max=True)
retry_afters = st.floats(min_value=0, max_value=100_000, allow_nan=False, allow_infinity=False)


@given(attempt=attempts, later=attempts, base=bases, cap=caps)
def test_it_never_shortens_the_ceiling_as_attempts_grow(attempt, later, base, cap):
    """Before jitter, the longest wait after more tries is never shorter than after fewer."""
    first, second = sorted((attempt, later))
    assert backoff_ceiling(first, base=base, cap=cap) <= backoff_ceiling(second, base=base, cap=cap)


@given(attempt=attempts, base=bases, cap=caps)
def test_it_keeps_the_ceiling_within_the_cap(attempt, base, cap):
    """The ceiling is min(cap, base * 2**attempt): exponential until the cap, then flat."""
    ceiling = backoff_ceiling(attempt, base=base, cap=cap)
    assert 0 <= ceiling <= cap
    if attempt <= 30:
        assert ceiling == min(cap, base * 2**attempt)


@given(attempt=attempts, base=bases, cap=caps, draw=unit)
def test_it_jitters_the_delay_between_zero_and_the_ceiling(attempt, base, cap, draw):
    """Full jitter: any delay from zero up to the ceiling, chosen by the random draw."""
    delay = retry_delay(attempt, base=base, cap=cap, rand=lambda: draw)
    assert 0 <= delay <= backoff_ceiling(attempt, base=base, cap=cap)


@given(attempt=attempts, base=bases, cap=caps)
def test_it_jitters_within_the_ceiling_with_the_default_random_source(attempt, base, cap):
    """The production random source keeps the same bounds."""
    assert 0 <= retry_delay(attempt, base=base, cap=cap) <= backoff_ceiling(attempt, base=base, cap=cap)


@given(attempt=attempts, base=bases, cap=caps, draw=unit, retry_after=retry_afters)
def test_it_never_retries_before_retry_after(attempt, base, cap, draw, retry_after):
    """A destination's Retry-After is a floor, even above the cap; otherwise the jitter stands."""
    ceiling = backoff_ceiling(attempt, base=base, cap=cap)
    delay = retry_delay(attempt, base=base, cap=cap, retry_after=retry_after, rand=lambda: draw)
    assert delay >= retry_after
    assert delay <= max(ceiling, retry_after)
    assert delay == max(draw * ceiling, retry_after)


def test_it_sends_an_always_failing_operation_to_review_exactly_at_the_attempt_limit(workspace, scripted_action):
    """Each failure before the limit schedules a retry that is not claimed before its time; the
    failure that uses the last attempt goes to needs_review, and nothing is claimed after it."""
    action = scripted_action(backoff_base_seconds=5.0, backoff_cap_seconds=60.0)

    @settings(max_examples=12, deadline=None)
    @given(max_attempts=st.integers(min_value=1, max_value=6))
    def check(max_attempts):
        action.max_attempts = max_attempts
        action.destination.replies = [TransientError("rate limited") for _ in range(max_attempts)]
        action.destination.calls = []
        # Each example runs in a savepoint that is rolled back, so examples do not see each other.
        with transaction.atomic(), time_machine.travel(START, tick=False) as traveller:
            run_until_review(action, max_attempts, traveller)
            transaction.set_rollback(True)

    def run_until_review(action, max_attempts, traveller):
        operation = submit(workspace, action.name)
        for attempt in range(1, max_attempts + 1):
            operation.refresh_from_db()
            if attempt > 1:
                assert operation.state == "retrying"
                early = operation.next_attempt_at - timedelta(milliseconds=1)
                assert claim_due_operations(limit=10, worker="early", now=early) == []
                traveller.move_to(operation.next_attempt_at)
            assert process_due_operations(worker="w") == 1
            operation.refresh_from_db()
            assert operation.attempts == attempt
            assert operation.state == ("needs_review" if attempt == max_attempts else "retrying")

        assert operation.next_attempt_at is None
        assert operation.last_error == {
            "category": "transient",
            "message": f"attempt limit reached ({max_attempts} of {max_attempts}): rate limited",
        }
        assert list(Attempt.objects.filter(operation=operation).values_list("number", "outcome")) == [
            (number, "transient") for number in range(1, max_attempts + 1)
        ]
        kinds = list(AuditEvent.objects.filter(operation=operation).values_list("kind", flat=True))
        assert kinds.count("retry_scheduled") == max_attempts - 1
        assert kinds[-1] == "needs_review"

        traveller.move_to(START + timedelta(hours=6))
        assert process_due_operations(worker="w") == 0
        assert Operation.objects.get(pk=operation.pk).state == "needs_review"
        assert len(action.destination.calls) == max_attempts

    check()


def test_it_schedules_the_retry_within_the_backoff_ceiling(workspace, scripted_action, time_machine):
    """The first retry waits at most base * 2**1 seconds after the failed try."""
    time_machine.move_to(START, tick=False)
    action = scripted_action(backoff_base_seconds=5.0, backoff_cap_seconds=60.0)
    action.destination.answer(TransientError("busy"))
    operation = submit(workspace, action.name)

    process_due_operations(worker="w")

    operation.refresh_from_db()
    assert operation.state == "retrying"
    assert START <= operation.next_attempt_at <= START + timedelta(seconds=10)
