"""A destination's limits hold for the whole cluster (``ledger.engine.limits``): its calls begin
paced, no more of them are in flight than its cap (slots held by another worker's connection count),
and its circuit breaker opens after transient failures in a row, gives claimed operations back untried
while it is open, lets one probe through after the cool-down and closes on the probe's answer.
The destination is scripted (tests/ledger/conftest.py); json-server takes the same limits from a
real qcluster in tests/faults/test_configured_limits_cluster.py."""

import threading
import time
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from ledger.actions import Limits
from ledger.engine import limits
from ledger.engine.lookups import ask_destination
from ledger.engine.processing import process_due_operations
from ledger.models import Attempt, AuditEvent, DestinationHealth, DestinationSlot, Operation
from ledger.outcomes import AmbiguousError, CannotTell, PermanentError, Success, TransientError
from tests.ledger.conftest import START, submit
from tests.ledger.engine.test_processing_concurrency import Gauge, answer_with, submit_many


def limited(scripted_action, **declared_limits):
    """An external action whose destination declares ``declared_limits``."""
    declared = Limits(**declared_limits)
    return scripted_action(external=True, max_concurrency=8, limits=lambda self: declared)


def states(operations):
    return [Operation.objects.get(pk=operation.pk).state for operation in operations]


def health(action):
    return DestinationHealth.objects.get(name=limits.row_name(action))


# --- pacing -------------------------------------------------------------------------------------


def test_calls_to_a_paced_destination_begin_one_step_apart(workspace, scripted_action):
    """Rate 10 per second: six calls, each about 1/10 s after the one before (never a burst),
    though the destination would take them all at once."""
    action = limited(scripted_action, rate_per_second=10)
    began = []

    def note_time(operation):
        began.append(time.monotonic())
        return Success(result={"sent": True})

    answer_with(action, note_time, 6)
    operations = submit_many(workspace, action, 6)

    process_due_operations(worker="w1")

    assert states(operations) == ["succeeded"] * 6
    gaps = [later - earlier for earlier, later in zip(began, began[1:], strict=False)]
    assert min(gaps) >= 0.07, gaps  # 1/10 s, less a call thread's start being late
    assert began[-1] - began[0] >= 0.45


def test_the_next_free_moment_is_shared_through_the_database(workspace, scripted_action):
    """Another worker that took the next moments makes this one wait for the moment after them."""
    action = limited(scripted_action, rate_per_second=2)
    other = limits.Gate(action)
    other.wait_for_turn()  # the first moment is now: no wait
    started = time.monotonic()
    limits.Gate(action).wait_for_turn()
    assert time.monotonic() - started >= 0.45  # half a second after the other worker's call


def test_a_destination_without_limits_costs_no_query(workspace, scripted_action, django_assert_num_queries):
    action = scripted_action(external=True)
    gate = limits.Gate(action)
    with django_assert_num_queries(0):
        assert gate.take_slots(3) == 3
        gate.wait_for_turn()
        assert gate.admission() is None
        gate.note(failed=True)
        gate.give_back_all()


# --- slots --------------------------------------------------------------------------------------


@pytest.fixture
def other_worker(db):
    """A second database session, as another worker's connection is."""
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"],
        port=settings["PORT"] or 5432,
        user=settings["USER"],
        password=settings["PASSWORD"],
        dbname=settings["NAME"],
        autocommit=True,
    ) as other:
        yield other


def take_slot_elsewhere(other, action, slot):
    prefix = f"ledger.slot:{limits.row_name(action)}:"
    taken = other.execute("SELECT pg_try_advisory_lock(hashtextextended(%s::text || %s, 0))", [prefix, slot])
    assert taken.fetchone()[0]


def test_calls_in_flight_stay_under_the_cap_across_workers(workspace, scripted_action, other_worker):
    """Cap 3, one slot held by another worker: this worker's batch has at most two calls in flight."""
    action = limited(scripted_action, concurrency=3)
    take_slot_elsewhere(other_worker, action, 0)
    gauge = Gauge(gather=2)
    answer_with(action, gauge, 7)
    operations = submit_many(workspace, action, 7)

    process_due_operations(worker="w1")

    assert gauge.most_in_flight == 2
    assert states(operations) == ["succeeded"] * 7


def test_a_slot_taken_twice_by_one_session_is_still_one_slot(workspace, scripted_action):
    """A session takes its own advisory lock again at once: the gate never counts a slot it holds as free."""
    action = limited(scripted_action, concurrency=2)
    gate = limits.Gate(action)
    assert gate.take_slots(1) == 1
    assert gate.take_slots(5) == 1
    assert gate.take_slots(1) == 0
    gate.give_back(1)
    assert gate.take_slots(3) == 1
    gate.give_back_all()
    assert gate.slots == []


def test_a_batch_lets_go_of_every_slot(workspace, scripted_action, other_worker):
    action = limited(scripted_action, concurrency=2)
    action.destination.answer(Success(), TransientError("503"), Success(), Success())
    submit_many(workspace, action, 4)

    process_due_operations(worker="w1")

    prefix = f"ledger.slot:{limits.row_name(action)}:"
    held = other_worker.execute(
        "SELECT count(*) FROM generate_series(0, 1) AS slot"
        " WHERE pg_try_advisory_lock(hashtextextended(%s::text || slot, 0))",
        [prefix],
    ).fetchone()[0]
    assert held == 2  # both free for another worker once the batch is done


def test_a_worker_waits_for_a_slot_while_every_one_is_elsewhere(workspace, scripted_action, other_worker):
    """Cap 1, held elsewhere: the worker makes no call until it is let go, then makes it."""
    action = limited(scripted_action, concurrency=1)
    take_slot_elsewhere(other_worker, action, 0)
    [operation] = submit_many(workspace, action, 1)

    def let_go_soon():
        other_worker.execute("SELECT pg_advisory_unlock_all()")

    threading.Timer(0.3, let_go_soon).start()
    started = time.monotonic()
    process_due_operations(worker="w1")

    assert time.monotonic() - started >= 0.25
    assert states([operation]) == ["succeeded"]
    assert len(action.destination.calls) == 1


# --- leased slots, behind a pooler in transaction mode ----------------------------------------


@pytest.fixture
def pooled(settings):
    """DATABASE_POOL_MODE=transaction: slots are leased rows (docs/operations.md, "Behind PgBouncer")."""
    settings.DATABASE_POOL_MODE = "transaction"


def lease_elsewhere(action, count: int) -> limits.Gate:
    """Another worker's gate holding ``count`` slots (a lease is a row: this session's lock would not count)."""
    other = limits.Gate(action)
    assert other.take_slots(count) == count
    return other


def held(action) -> list[int]:
    return sorted(
        DestinationSlot.objects.filter(name=limits.row_name(action), held_until__gt=timezone.now()).values_list(
            "slot", flat=True
        )
    )


def test_behind_a_pooler_calls_in_flight_stay_under_the_cap_across_workers(pooled, workspace, scripted_action):
    """Cap 3, one slot leased by another worker: this worker's batch has at most two calls in flight,
    and lets go of its own slots only."""
    action = limited(scripted_action, concurrency=3)
    lease_elsewhere(action, 1)
    gauge = Gauge(gather=2)
    answer_with(action, gauge, 7)
    operations = submit_many(workspace, action, 7)

    process_due_operations(worker="w1")

    assert gauge.most_in_flight == 2
    assert states(operations) == ["succeeded"] * 7
    assert held(action) == [0]


def test_behind_a_pooler_a_gate_never_counts_a_slot_it_holds_as_free(pooled, workspace, scripted_action):
    action = limited(scripted_action, concurrency=2)
    gate = limits.Gate(action)
    assert gate.take_slots(1) == 1
    assert gate.take_slots(5) == 1
    assert gate.take_slots(1) == 0
    gate.give_back(1)
    assert held(action) == [1]
    assert gate.take_slots(3) == 1
    gate.give_back_all()
    assert gate.slots == []
    assert held(action) == []


def test_behind_a_pooler_a_lease_lasts_a_tasks_timeout(pooled, workspace, scripted_action, settings):
    """The cluster ends a task that runs longer, so no call outlives it."""
    action = limited(scripted_action, concurrency=1)
    lease_elsewhere(action, 1)

    lease = DestinationSlot.objects.get().held_until - timezone.now()

    timeout = settings.Q_CLUSTER["timeout"]
    assert timedelta(seconds=timeout - 5) < lease <= timedelta(seconds=timeout)


def test_behind_a_pooler_a_dead_workers_slot_comes_back_when_its_lease_ends(pooled, workspace, scripted_action):
    """The worker died holding the only slot: nobody calls until its lease (a task's timeout) has
    ended; then the slot is taken, and the dead worker's late let-go does not free it."""
    action = limited(scripted_action, concurrency=1)
    dead = lease_elsewhere(action, 1)
    gate = limits.Gate(action)
    assert gate.take_slots(1) == 0

    DestinationSlot.objects.filter(name=limits.row_name(action)).update(
        held_until=timezone.now() - timedelta(seconds=1)
    )

    assert gate.take_slots(1) == 1
    dead.give_back_all()
    assert held(action) == [0]
    assert limits.Gate(action).take_slots(1) == 0


@pytest.mark.django_db(transaction=True)
def test_behind_a_pooler_racing_workers_take_each_slot_once(pooled, workspace, scripted_action):
    """Eight workers, each on its own connection, released together, each wanting every slot of 3."""
    action = limited(scripted_action, concurrency=3)
    barrier = threading.Barrier(8, timeout=30)
    taken, lock = [], threading.Lock()

    def worker():
        try:
            gate = limits.Gate(action)
            barrier.wait()
            gate.take_slots(3)
            with lock:
                taken.extend(gate.slots)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(taken) == [0, 1, 2]
    assert held(action) == [0, 1, 2]


# --- the circuit breaker ------------------------------------------------------------------------


def test_the_breaker_opens_after_failures_in_a_row_and_holds_the_rest_untried(workspace, scripted_action, frozen):
    action = limited(scripted_action, breaker_threshold=2, breaker_cooldown=timedelta(seconds=30))
    action.destination.answer(TransientError("HTTP 503"), AmbiguousError("timed out"))
    operations = submit_many(workspace, action, 5)

    process_due_operations(worker="w1")

    assert len(action.destination.calls) == 2
    row = health(action)
    assert (row.failures_in_row, row.breaker_until, row.probing) == (2, START + timedelta(seconds=30), False)
    held = operations[2:]
    assert states(held) == ["retrying"] * 3
    for operation in held:
        operation.refresh_from_db()
        assert operation.next_attempt_at == START + timedelta(seconds=30)
        # The time is data beside the words (ledger.timed), not text in them.
        assert operation.last_error_message == f"calls to {action.name} paused until {{paused_until}} (circuit breaker)"
        assert operation.last_error_times == {"paused_until": "2030-01-07T09:00:30+00:00"}
        assert operation.lease_owner == ""
        assert operation.lease_expires_at is None
    assert not Attempt.objects.filter(operation__in=held).exists()  # no try counted
    assert AuditEvent.objects.filter(operation__in=held, kind="held").count() == 3


def test_while_open_nothing_is_called_and_a_claimed_operation_is_given_back(workspace, scripted_action, frozen):
    action = limited(scripted_action, breaker_threshold=1, breaker_cooldown=timedelta(seconds=60))
    action.destination.answer(TransientError("HTTP 503"))
    [first] = submit_many(workspace, action, 1)
    process_due_operations(worker="w1")
    later = submit(workspace, action.name, request_id="R-later")

    process_due_operations(worker="w1")

    assert len(action.destination.calls) == 1
    later.refresh_from_db()
    assert later.state == "retrying"
    assert later.next_attempt_at == START + timedelta(seconds=60)


def test_a_pause_longer_than_the_attempt_limit_spends_no_try(workspace, scripted_action, frozen):
    """Held again and again while another worker's probe stays in flight, the operation keeps its
    tries: each hold gives back the count its claim took."""
    action = limited(scripted_action, breaker_threshold=1, breaker_cooldown=timedelta(seconds=600))
    DestinationHealth.objects.create(
        name=limits.row_name(action), failures_in_row=1, probing=True, breaker_until=START + timedelta(seconds=600)
    )
    operation = submit(workspace, action.name, request_id="R-held")
    for hold in range(action.max_attempts + 2):
        frozen.move_to(START + limits.PROBE_RECHECK * hold, tick=False)
        process_due_operations(worker="w1")

    operation.refresh_from_db()
    assert (operation.state, operation.attempts) == ("retrying", 0)
    assert AuditEvent.objects.filter(operation=operation, kind="held").count() == action.max_attempts + 2
    assert action.destination.calls == []


def test_after_the_cool_down_one_probe_closes_it(workspace, scripted_action, frozen):
    action = limited(scripted_action, breaker_threshold=1, breaker_cooldown=timedelta(seconds=30))
    action.destination.answer(TransientError("HTTP 503"))
    operations = submit_many(workspace, action, 4)
    process_due_operations(worker="w1")
    assert len(action.destination.calls) == 1

    frozen.move_to(START + timedelta(seconds=31), tick=False)
    process_due_operations(worker="w1")

    assert len(action.destination.calls) == 5  # the probe, then the rest (the first one's retry too)
    assert states(operations) == ["succeeded"] * 4
    row = health(action)
    assert (row.failures_in_row, row.breaker_until, row.probing) == (0, None, False)
    opened, closed = AuditEvent.objects.filter(kind__startswith="breaker_").order_by("id")
    assert (opened.kind, opened.actor, opened.operation, opened.workspace) == ("breaker_opened", "w1", None, None)
    assert opened.message == f"calls to {action.name} paused until {{paused_until}} (circuit breaker)"
    assert opened.times == {"paused_until": "2030-01-07T09:00:30+00:00"}
    assert (closed.kind, closed.message) == ("breaker_closed", f"calls to {action.name} resume: a call was answered")


def test_a_failed_probe_opens_it_for_another_cool_down(workspace, scripted_action, frozen):
    action = limited(scripted_action, breaker_threshold=3, breaker_cooldown=timedelta(seconds=30))
    action.destination.answer(*[TransientError("HTTP 503")] * 4)
    operations = submit_many(workspace, action, 5)
    process_due_operations(worker="w1")
    assert len(action.destination.calls) == 3

    frozen.move_to(START + timedelta(seconds=31), tick=False)
    process_due_operations(worker="w1")

    assert len(action.destination.calls) == 4  # one probe, no more
    row = health(action)
    assert row.breaker_until == START + timedelta(seconds=61)
    assert not row.probing
    assert states(operations).count("succeeded") == 0
    assert AuditEvent.objects.filter(kind="breaker_opened").count() == 2
    assert not AuditEvent.objects.filter(kind="breaker_closed").exists()


def test_a_call_in_flight_that_fails_once_it_is_open_does_not_prolong_the_pause(workspace, scripted_action, frozen):
    action = limited(scripted_action, breaker_threshold=1, breaker_cooldown=timedelta(seconds=30))
    gate = limits.Gate(action)
    gate.note(failed=True)
    frozen.move_to(START + timedelta(seconds=10), tick=False)
    limits.Gate(action).note(failed=True)

    assert health(action).breaker_until == START + timedelta(seconds=30)
    assert AuditEvent.objects.filter(kind="breaker_opened").count() == 1


def test_a_refusal_is_an_answer_and_closes_the_breaker(workspace, scripted_action, frozen):
    """A 4xx says the destination is up: it breaks the row of failures (the operation itself goes to review)."""
    action = limited(scripted_action, breaker_threshold=2, breaker_cooldown=timedelta(seconds=30))
    action.destination.answer(TransientError("HTTP 503"), PermanentError("HTTP 422"), TransientError("HTTP 503"))
    operations = submit_many(workspace, action, 4)

    process_due_operations(worker="w1")

    assert health(action).breaker_until is None
    assert len(action.destination.calls) == 4
    assert states(operations)[1] == "needs_review"


def test_a_batch_admitted_before_another_worker_opened_the_breaker_calls_no_more(workspace, scripted_action, frozen):
    """A worker admitted while the breaker was closed went on calling after another worker's
    failures opened it (seen on a loaded CI run: a call 0.2 s into a 4 s pause). Each call reads the
    breaker again once it has its slot."""
    action = limited(scripted_action, breaker_threshold=2, breaker_cooldown=timedelta(seconds=30))
    other_worker = limits.Gate(action)

    def while_in_flight_the_other_worker_fails_twice(operation):
        other_worker.note(failed=True)
        other_worker.note(failed=True)
        return Success(result={"sent": True})

    action.destination.answer(while_in_flight_the_other_worker_fails_twice)
    operations = submit_many(workspace, action, 4)

    process_due_operations(worker="w1")

    assert len(action.destination.calls) == 1
    assert states(operations[1:]) == ["retrying"] * 3
    assert health(action).breaker_until == START + timedelta(seconds=30)


def test_a_call_waiting_for_its_slot_while_the_breaker_opens_is_given_back(workspace, scripted_action, frozen):
    action = limited(scripted_action, breaker_threshold=1, breaker_cooldown=timedelta(seconds=30), concurrency=1)
    gate = limits.Gate(action)
    assert gate.admission() is None  # admitted: closed
    limits.Gate(action).note(failed=True)  # another worker's failure opens it

    assert gate.recheck() == START + timedelta(seconds=30)
    frozen.move_to(START + timedelta(seconds=31), tick=False)
    assert gate.recheck() == START + timedelta(seconds=31) + limits.PROBE_RECHECK  # the probe is a batch's
    assert limits.Gate(action).admission() is None  # which the next batch takes


def test_while_another_worker_probes_operations_wait_a_few_seconds(workspace, scripted_action, frozen):
    action = limited(scripted_action, breaker_threshold=1, breaker_cooldown=timedelta(seconds=300))
    DestinationHealth.objects.create(
        name=limits.row_name(action), failures_in_row=1, probing=True, breaker_until=START + timedelta(seconds=300)
    )
    [operation] = submit_many(workspace, action, 1)

    process_due_operations(worker="w1")

    operation.refresh_from_db()
    assert action.destination.calls == []
    assert (operation.state, operation.next_attempt_at) == ("retrying", START + limits.PROBE_RECHECK)


def test_only_one_worker_takes_the_probe(workspace, scripted_action, frozen):
    action = limited(scripted_action, breaker_threshold=1, breaker_cooldown=timedelta(seconds=30))
    DestinationHealth.objects.create(
        name=limits.row_name(action), failures_in_row=1, breaker_until=START - timedelta(seconds=1)
    )
    first, second = limits.Gate(action), limits.Gate(action)
    assert first.admission() is None
    assert first.probing
    assert second.admission() == START + limits.PROBE_RECHECK  # a look again soon: the probe decides
    assert not second.probing


def test_a_lookup_is_not_made_while_calls_are_paused(workspace, scripted_action, frozen):
    action = limited(scripted_action, breaker_threshold=1, breaker_cooldown=timedelta(seconds=30))
    action.destination.answer(TransientError("HTTP 503"))
    [operation] = submit_many(workspace, action, 1)
    process_due_operations(worker="w1")
    asked = []
    action.lookup = lambda operation: asked.append(operation) or CannotTell("unreachable")

    answer = ask_destination(operation, action)

    assert asked == []
    assert isinstance(answer, CannotTell)
    assert not answer.final
    assert answer.reason == f"not asked: calls to {action.name} are paused (circuit breaker)"
