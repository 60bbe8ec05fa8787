"""A conflicting arrival racing a worker's claim of the same operation (on_conflict: hold), on
PostgreSQL with real connections: the claim committed first, the operation runs once with its first
payload and the conflict stays open; the hold committed first, the worker never performs it until a
person decides. Never both, never neither."""

import threading
import time

import pytest
from django.db import connection, transaction

from ledger.engine.claiming import claim_due_operations
from ledger.engine.performing import perform_claimed
from ledger.engine.processing import process_due_operations
from ledger.models import Attempt, AuditEvent, Conflict, Operation
from ledger.outcomes import Success
from ledger.people import conflict_decisions
from tests.ledger.people.test_conflict_holds import held_operation, send

# A safety net for the waits below, never reached when the code is right (not a timing assertion).
WAIT = 10


def waiting_on_a_lock() -> int:
    """How many other sessions of this database wait for a row lock now."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)


def in_thread(target, failures: list) -> threading.Thread:
    def run():
        try:
            target()
        except Exception as exc:  # noqa: BLE001 - reported by the test's assertion on failures
            failures.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_an_arrival_waiting_for_a_claim_in_progress_leaves_the_claimed_operation_to_run(workspace, noted):
    """The worker holds its claim's transaction open; the conflicting arrival waits for that row,
    then finds it processing: nothing is held, and the operation runs once, as first sent."""
    action = noted(on_conflict="hold")
    send(workspace, action, "first")
    claimed, commit, answered, failures, answers = threading.Event(), threading.Event(), threading.Event(), [], []

    def worker():
        with transaction.atomic():
            [operation] = claim_due_operations(limit=10, worker="racer")
            claimed.set()
            assert commit.wait(WAIT)
        # The try is performed once the arrival has its answer: the answer shows the row as the
        # arrival found it, not as a try that finished meanwhile (on a busy machine, it could).
        assert answered.wait(WAIT)
        perform_claimed(operation, worker="racer")

    def arrival():
        answers.append(send(workspace, action, "second"))
        answered.set()

    threads = [in_thread(worker, failures)]
    assert claimed.wait(WAIT)
    threads.append(in_thread(arrival, failures))
    until(lambda: waiting_on_a_lock() == 1, "the arrival to wait for the claimed row")
    commit.set()
    for thread in threads:
        thread.join()

    assert failures == []
    [answer] = answers
    assert answer.outcome == "conflict"
    assert answer.operation.state == "processing"
    operation = Operation.objects.get()
    assert (operation.state, operation.attempts) == ("succeeded", 1)
    assert action.destination.notes == ["first"]
    assert Attempt.objects.count() == 1
    assert Conflict.objects.get().status == "open"
    assert not AuditEvent.objects.filter(kind="conflict_held").exists()


@pytest.mark.django_db(transaction=True)
def test_a_claim_during_an_uncommitted_hold_passes_the_row_by_and_finds_it_held_after(workspace, noted, alice):
    """The arrival holds the row, uncommitted; the worker's claim skips the locked row and, once the
    hold is committed, finds nothing to claim. Only the decision lets it run, once."""
    action = noted(on_conflict="hold")
    send(workspace, action, "first")
    held, commit, failures, claims = threading.Event(), threading.Event(), [], []

    def arrival():
        with transaction.atomic():
            assert send(workspace, action, "second").outcome == "conflict"
            held.set()
            assert commit.wait(WAIT)

    def claim():
        claims.append(claim_due_operations(limit=10, worker="racer"))

    threads = [in_thread(arrival, failures)]
    assert held.wait(WAIT)
    claimer = in_thread(claim, failures)
    claimer.join()
    commit.set()
    threads[0].join()
    claimer = in_thread(claim, failures)
    claimer.join()

    assert failures == []
    assert claims == [[], []]
    operation = Operation.objects.get()
    assert (operation.state, operation.attempts, operation.last_error_category) == ("needs_review", 0, "conflict")
    assert action.destination.notes == []

    conflict_decisions.dismiss_conflicts([Conflict.objects.get().pk], user=alice, reason="a resend")
    process_due_operations()
    process_due_operations()
    assert action.destination.notes == ["first"]


@pytest.mark.django_db(transaction=True)
def test_a_release_and_a_new_conflict_at_once_never_let_an_undecided_conflict_run(workspace, noted, alice):
    """A person dismisses the conflict that holds an operation while another conflicting delivery
    arrives: either the arrival is counted before the release (it stays held) or it holds the
    released operation again. It never runs while a conflict of it is open."""
    action = noted(on_conflict="hold")
    operation, conflict = held_operation(workspace, action)
    start, failures = threading.Barrier(2, timeout=WAIT), []

    def dismiss():
        start.wait()
        conflict_decisions.dismiss_conflicts([conflict.pk], user=alice, reason="stale")

    def arrive():
        start.wait()
        send(workspace, action, "third")

    threads = [in_thread(dismiss, failures), in_thread(arrive, failures)]
    for thread in threads:
        thread.join()

    assert failures == []
    operation.refresh_from_db()
    assert operation.state == "needs_review"
    assert operation.last_error_category == "conflict"
    assert Conflict.objects.filter(status="open").count() == 1
    process_due_operations()
    assert action.destination.notes == []


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_arrivals_racing_a_busy_worker_hold_or_run_each_operation_exactly_once(workspace, noted, alice):
    """Thirty operations; a worker claims and performs while conflicting deliveries for all of them
    arrive from another connection. Each operation is then either held before any try, or ran once
    with its first payload, its conflict open; dismissing the held ones runs each of them once."""
    action = noted(on_conflict="hold")
    performed, lock = [], threading.Lock()

    def record(operation):
        with lock:
            performed.append((operation.payload["request_id"], operation.payload["note"]))
        return Success(result={})

    action.destination = record
    ids = [f"R-{n}" for n in range(30)]
    for request_id in ids:
        send(workspace, action, "first", request_id=request_id)
    start, failures, worked = threading.Barrier(2, timeout=WAIT), [], threading.Event()

    def work():
        start.wait()
        while not worked.is_set():
            if not process_due_operations(limit=3):
                worked.set()

    def arrive():
        start.wait()
        for request_id in reversed(ids):
            assert send(workspace, action, "second", request_id=request_id).outcome == "conflict"

    threads = [in_thread(work, failures), in_thread(arrive, failures)]
    for thread in threads:
        thread.join()
    assert failures == []

    held = set()
    for operation in Operation.objects.all():
        request_id = operation.payload["request_id"]
        if operation.state == "needs_review":
            assert (operation.attempts, operation.last_error_category) == (0, "conflict")
            assert (request_id, "first") not in performed
            held.add(request_id)
        else:
            assert (operation.state, operation.attempts) == ("succeeded", 1)
            assert performed.count((request_id, "first")) == 1
    assert AuditEvent.objects.filter(kind="conflict_held").count() == len(held)

    open_conflicts = Conflict.objects.filter(operation__state="needs_review").values_list("pk", flat=True)
    conflict_decisions.dismiss_conflicts(set(open_conflicts), user=alice, reason="resends")
    while process_due_operations():
        pass
    assert sorted(performed) == sorted((request_id, "first") for request_id in ids)
    assert set(Operation.objects.values_list("state", flat=True)) == {"succeeded"}
