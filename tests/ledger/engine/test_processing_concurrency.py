"""External calls of a claimed batch run concurrently, capped per destination: once one call of a
destination succeeded on its own, the rest of the batch's calls to it go out from a thread pool,
at most ``max_concurrency`` at a time. The threads make the calls and nothing else: every try is
begun and every outcome recorded by the worker's own thread, on its one database connection."""

import threading
import time

import psycopg
import pytest
from django.db import connection

from ledger.engine.claiming import claim_due_operations
from ledger.engine.performing import begin_calls, finish_call, finish_calls
from ledger.engine.processing import process_due_operations
from ledger.models import Attempt, AuditEvent, Operation
from ledger.outcomes import Success
from ledger.sweep import sweep
from tests.conftest import external_event
from tests.ledger.conftest import submit
from tests.ledger.engine.test_processing_sets import take_over

# A safety net for the gates below, never reached when the code is right (not a timing assertion).
GATE_TIMEOUT = 10


class Gauge:
    """A destination that counts the calls in flight. The first call (the one that goes alone)
    answers at once; later ones are held until ``gather`` of them are in flight together (a
    barrier), so the highest count seen is exactly the cap when calls overlap and the cap holds."""

    def __init__(self, gather: int, *, while_in_flight=None):
        self.barrier = threading.Barrier(gather, timeout=GATE_TIMEOUT)
        self.while_in_flight = while_in_flight
        self.lock = threading.Lock()
        self.calls = self.in_flight = self.most_in_flight = 0

    def __call__(self, operation):
        with self.lock:
            self.calls += 1
            first = self.calls == 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if not first:
                self.barrier.wait()
                if self.while_in_flight:
                    self.while_in_flight(operation)
            return Success(result={"sent": True}, external_id=f"crm-{operation.pk}")
        finally:
            with self.lock:
                self.in_flight -= 1


def answer_with(action, gauge, count):
    action.destination.answer(*[gauge] * count)


def submit_many(workspace, action, count):
    return [submit(workspace, action.name, request_id=f"R-{n}") for n in range(count)]


def assert_all_succeeded_once(operations):
    for operation in operations:
        operation.refresh_from_db()
        assert operation.state == "succeeded", (operation.key, operation.state, operation.last_error)
        [attempt] = Attempt.objects.filter(operation=operation)
        assert (attempt.outcome, attempt.fencing_token, attempt.external_id) == (
            "ok",
            operation.fencing_token,
            operation.external_id,
        )
        assert AuditEvent.objects.get(operation=operation, kind="succeeded").attempt == attempt


def test_it_calls_a_destination_concurrently_up_to_its_cap(workspace, scripted_action):
    """Ten operations: the first call goes alone, the other nine three at a time, never four."""
    action = scripted_action(external=True, honours_idempotency_keys=True, max_concurrency=3)
    gauge = Gauge(gather=3)
    answer_with(action, gauge, 10)
    operations = submit_many(workspace, action, 10)

    assert process_due_operations(worker="w1") == 10

    assert gauge.most_in_flight == 3
    assert_all_succeeded_once(operations)
    assert sorted(key for key, _ in action.destination.calls) == sorted(op.key for op in operations)
    assert set(Attempt.objects.values_list("idempotency_key", flat=True)) == {op.key for op in operations}
    assert set(Attempt.objects.values_list("worker", flat=True)) == {"w1"}


def test_it_shares_the_smallest_cap_between_actions_that_call_one_destination(workspace, scripted_action):
    """Two actions with caps 4 and 2 call the same system: together, at most two calls are in flight."""
    same_destination = {"destination_name": lambda self: "crm.example"}
    wide = scripted_action(external=True, max_concurrency=4, **same_destination)
    narrow = scripted_action(external=True, max_concurrency=2, **same_destination)
    gauge = Gauge(gather=2)
    answer_with(wide, gauge, 4)
    answer_with(narrow, gauge, 3)
    operations = [
        submit(workspace, action.name, request_id=f"R-{n}")
        for n, action in enumerate([wide, narrow, wide, narrow, wide, narrow, wide])
    ]

    process_due_operations(worker="w1")

    assert gauge.most_in_flight == 2
    assert_all_succeeded_once(operations)


def test_it_calls_one_at_a_time_when_the_action_declares_no_concurrency(workspace, scripted_action):
    """``max_concurrency`` defaults to 1: an action must declare that its perform may run in threads."""
    action = scripted_action(external=True)
    gauge = Gauge(gather=1)
    answer_with(action, gauge, 4)
    operations = submit_many(workspace, action, 4)

    process_due_operations(worker="w1")

    assert gauge.most_in_flight == 1
    assert_all_succeeded_once(operations)


def test_it_calls_one_at_a_time_until_a_call_succeeds(workspace, scripted_action):
    """A destination that fails the first calls of a batch is not met with a pool of them: calls go
    one at a time until one succeeds, and only then concurrently."""
    from ledger.outcomes import TransientError

    action = scripted_action(external=True, max_concurrency=3)
    gauge = Gauge(gather=3)
    action.destination.answer(TransientError("503"), TransientError("503"), *[gauge] * 7)
    operations = submit_many(workspace, action, 9)

    process_due_operations(worker="w1")

    states = [Operation.objects.get(pk=operation.pk).state for operation in operations]
    assert states == ["retrying", "retrying"] + ["succeeded"] * 7
    assert gauge.most_in_flight == 3


class Wide:
    """A destination whose calls must all be in flight at once: each is held until ``gather`` of
    them are (a barrier), so a batch that sent one call ahead of the others could not pass."""

    def __init__(self, gather: int):
        self.barrier = threading.Barrier(gather, timeout=GATE_TIMEOUT)

    def __call__(self, operation):
        self.barrier.wait()
        return Success(result={"sent": True}, external_id=f"crm-{operation.pk}")


def test_a_destination_that_just_worked_is_called_concurrently_from_the_first_call(workspace, scripted_action):
    """Once a batch's every call to a destination succeeded, the next batch, on any worker, sends
    nothing ahead: all its calls go out together (here three, the cap), none alone first."""
    action = scripted_action(external=True, max_concurrency=3)
    gauge = Gauge(gather=3)
    answer_with(action, gauge, 4)
    submit_many(workspace, action, 4)
    process_due_operations(worker="w1")  # cold: one call alone, then three together

    wide = Wide(gather=3)
    answer_with(action, wide, 3)
    later = [submit(workspace, action.name, request_id=f"L-{n}") for n in range(3)]
    process_due_operations(worker="w2")  # another worker: what the tries recorded is shared

    assert_all_succeeded_once(later)
    assert wide.barrier.broken is False


class Lonely:
    """A destination whose first call waits a moment for company (another call starting while it
    is in flight) and notes whether any came; the calls after it answer at once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.calls = 0
        self.company = threading.Event()
        self.first_had_company = None

    def __call__(self, operation):
        with self.lock:
            self.calls += 1
            first = self.calls == 1
        if first:
            self.first_had_company = self.company.wait(timeout=0.5)
        else:
            self.company.set()
        return Success(result={"sent": True}, external_id=f"crm-{operation.pk}")


def test_a_destination_that_failed_is_probed_again_one_call_first(workspace, scripted_action):
    """A batch with a failed call makes the destination cold again: the next batch sends one call
    alone, and the others only once it succeeded."""
    from ledger.outcomes import TransientError

    action = scripted_action(external=True, max_concurrency=2)
    action.destination.answer(Success(result={"sent": True}), TransientError("503"))
    submit_many(workspace, action, 3)
    process_due_operations(worker="w1")  # cold: one alone, then two together, one of which fails

    lonely = Lonely()
    answer_with(action, lonely, 3)
    later = [submit(workspace, action.name, request_id=f"L-{n}") for n in range(3)]
    process_due_operations(worker="w1")

    assert_all_succeeded_once(later)
    assert lonely.first_had_company is False


def test_the_lonely_destination_notices_company(workspace, scripted_action):
    """The check above can fail: called wide (a destination that just worked), the first call of
    a batch has company."""
    action = scripted_action(external=True, max_concurrency=2)
    submit_many(workspace, action, 2)
    process_due_operations(worker="w1")  # every call succeeds: the destination is now working

    lonely = Lonely()
    answer_with(action, lonely, 2)
    later = [submit(workspace, action.name, request_id=f"L-{n}") for n in range(2)]
    process_due_operations(worker="w1")

    assert_all_succeeded_once(later)
    assert lonely.first_had_company is True


def test_it_refuses_a_database_query_from_a_call_thread(workspace, scripted_action):
    """perform runs in a pool thread and must only call its destination: a query there is refused
    (it would open a connection per thread), and the outcome is ambiguous, since the call may have
    left before it."""
    action = scripted_action(external=True, max_concurrency=2)
    gauge = Gauge(gather=2, while_in_flight=lambda operation: Operation.objects.count())
    answer_with(action, gauge, 3)
    first, *others = submit_many(workspace, action, 3)

    process_due_operations(worker="w1")

    first.refresh_from_db()
    assert first.state == "succeeded"
    for operation in others:
        operation.refresh_from_db()
        assert (operation.state, operation.last_error_category) == ("unknown", "ambiguous")
        attempt = Attempt.objects.get(operation=operation)
        assert (attempt.outcome, attempt.error_type) == ("ambiguous", "RuntimeError")
        assert attempt.error_message == "an external action's perform ran a database query from a call thread"


def client_backends(monitor) -> int:
    return monitor.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'"
    ).fetchone()[0]


def test_it_opens_no_database_connection_from_the_call_threads(workspace, scripted_action):
    """While eight calls are in flight, the database sees the same client connections as before."""
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"] or "127.0.0.1",
        port=settings["PORT"] or 5432,
        user=settings["USER"],
        password=settings["PASSWORD"] or None,
        dbname=settings["NAME"],
        autocommit=True,
    ) as monitor:
        seen, lock = [], threading.Lock()

        def count_connections(operation):
            with lock:
                seen.append(client_backends(monitor))

        action = scripted_action(external=True, max_concurrency=8)
        gauge = Gauge(gather=8, while_in_flight=count_connections)
        answer_with(action, gauge, 9)
        operations = submit_many(workspace, action, 9)
        before = client_backends(monitor)

        process_due_operations(worker="w1")

        assert gauge.most_in_flight == 8
        assert seen == [before] * 8
        assert client_backends(monitor) == before
    assert_all_succeeded_once(operations)


def test_it_refuses_a_success_recorded_together_whose_claim_was_lost(workspace, scripted_action):
    """Successes that arrive together are recorded in one transaction; when one of them lost its
    claim meanwhile, nothing of it is kept and each is recorded on its own: that one refused as
    stale (its attempt keeps what the destination said), the others succeeded."""
    action = scripted_action(external=True, honours_idempotency_keys=True)
    operations = submit_many(workspace, action, 3)
    claimed = claim_due_operations(limit=10, worker="old")
    calls = begin_calls(claimed, worker="old")
    lost = claimed[1]
    take_over(lost)
    successes = [Success(result={"sent": True}, external_id=f"crm-{n}") for n in range(3)]

    assert not finish_calls(calls, successes)
    assert not AuditEvent.objects.filter(kind="succeeded").exists()

    for call, success in zip(calls, successes, strict=True):
        finish_call(call, success)
    assert_all_succeeded_once([op for op in operations if op.pk != lost.pk])
    lost.refresh_from_db()
    assert (lost.state, lost.lease_owner, lost.fencing_token, lost.external_id) == ("processing", "new", 2, "")
    attempt = Attempt.objects.get(operation=lost)
    assert (attempt.fencing_token, attempt.outcome, attempt.external_id) == (1, "stale", "crm-1")
    assert AuditEvent.objects.get(operation=lost, kind="stale_completion_refused").actor == "old"


def test_it_begins_no_try_for_a_claim_lost_before_its_call(workspace, scripted_action):
    """A claim lost while the first call ran: the tries begun together find it gone, so they are
    begun one at a time; that one is refused before anything is sent, the others go out."""
    action = scripted_action(external=True, max_concurrency=4)
    first, second, lost, fourth = operations = submit_many(workspace, action, 4)

    def first_call(operation):
        take_over(lost)  # the first call runs in the worker's thread: this is the database, not a thread
        return Success(result={"sent": True}, external_id="crm-first")

    action.destination.answer(first_call)

    process_due_operations(worker="old")

    assert_all_succeeded_once([first, second, fourth])
    assert lost.key not in [key for key, _ in action.destination.calls]
    lost.refresh_from_db()
    assert (lost.state, lost.lease_owner) == ("processing", "new")
    assert not Attempt.objects.filter(operation=lost).exists()
    assert AuditEvent.objects.get(operation=lost, kind="stale_completion_refused").actor == "old"
    assert len(operations) == 4


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_it_keeps_the_leases_of_a_batch_while_its_calls_hang(workspace, scripted_action, settings):
    """With a 2-second lease, two calls hang for 3 seconds while two more operations wait their
    turn; meanwhile the sweep runs (another process would). The worker renews the batch's leases
    while it waits for the calls, so the sweep takes nothing back and every operation succeeds."""
    settings.OPSCONSOLE_LEASE_SECONDS = 2
    released = threading.Event()
    reports = []

    def sweep_meanwhile():
        time.sleep(3)  # past every lease the claim gave
        try:
            reports.append(sweep())
        finally:
            connection.close()
            released.set()

    def hang(operation):
        released.wait(GATE_TIMEOUT)

    action = scripted_action(external=True, max_concurrency=2)
    gauge = Gauge(gather=2, while_in_flight=hang)
    answer_with(action, gauge, 5)
    operations = submit_many(workspace, action, 5)
    sweeper = threading.Thread(target=sweep_meanwhile)
    sweeper.start()
    try:
        process_due_operations(worker="w1")
    finally:
        sweeper.join()

    assert reports
    assert reports[0].leases_expired == 0
    assert_all_succeeded_once(operations)
    assert not AuditEvent.objects.filter(kind__in=["lease_expired", "stale_completion_refused"]).exists()


def test_it_calls_a_real_destination_concurrently(workspace, standin):
    """Against the stand-in over HTTP (each answer 200 ms late): one record per operation, each try
    carrying its idempotency key, nothing sent twice."""
    from ledger.intake.submit import submit_batch

    standin.fail_next(*[{"kind": "delay", "seconds": 0.2}] * 12)
    events = [external_event("file-ticket", delivery_id=f"d-{n}", request_id=f"R-{n}") for n in range(12)]
    operations = [result.operation for result in submit_batch(workspace=workspace, raw_events=events, source="api")]

    assert process_due_operations(worker="w1") == 12

    assert_all_succeeded_once(operations)
    records = standin.records()
    assert sorted(record["idempotency_key"] for record in records) == sorted(op.key for op in operations)
    assert sorted(record["id"] for record in records) == sorted(Operation.objects.values_list("external_id", flat=True))
    assert standin.requests("POST /records") == 12
