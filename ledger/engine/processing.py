"""Processing: work through a claimed batch (``ledger.engine.claiming``), record each outcome under a fence.

``process_due_operations`` works through a claimed batch in groups (internal operations by action,
external ones by destination), one operation at a time until one of a group succeeds, then the
rest of the group together: an internal set in one transaction, external calls concurrently from a
thread pool, capped per destination (``ledger.engine.performing``). Internal effects commit with
``succeeded``; an external try's Attempt is written before its request leaves, the call runs
outside any transaction, and every database write stays in this thread. Every outcome is written
by a guarded UPDATE that also requires the claim's token (``ledger.engine.fencing``): a worker whose
lease expired and whose operation someone else took over changes nothing (its completion is
refused and audited).
"""

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from ledger.actions import ActionDefinition, UnknownAction, get_action, registry
from ledger.core import nudges
from ledger.engine import destination_health, faults, limits
from ledger.engine.claiming import claim_due_operations, keep_leases, worker_name
from ledger.engine.performing import (
    Call,
    begin_call,
    begin_calls,
    call_destination,
    finish_call,
    finish_calls,
    needs_approval,
    perform_claimed,
    perform_internal_set,
)
from ledger.models import Operation, Ordering
from ledger.outcomes import Success
from ledger.states import State

logger = logging.getLogger("ledger")


def process_due_operations(*, limit: int | None = None, worker: str | None = None) -> int:
    """Claim one batch and work through it. Returns how many operations were claimed.

    The batch is worked through in groups, in claim order: internal operations by action, external
    ones by destination. A group whose actions are not known to work goes one operation at a time
    until one of them succeeds; then (or at once, when the last batches that met them, on any
    worker, all succeeded: ``ledger.engine.destination_health``) the rest of an internal group whose
    action has ``perform_many`` completes as one set (one transaction; if it cannot commit, they go
    one at a time, which also refuses a stale claim properly), and the rest of an external group calls its destination
    concurrently, at most its ``max_concurrency`` in flight. An action or a destination that is
    failing thus meets the batch one operation at a time, as it did before sets and concurrency;
    and a worker that dies at a cold destination's first call has one request in flight, not a
    pool's worth.

    A database failure while one operation is worked on (its outcome could not be recorded even
    on a fresh connection) is logged and leaves that operation to the sweep; the rest of the
    batch goes on, so their claims do not sit out their leases.
    """
    worker = worker or worker_name()
    claimed = claim_due_operations(
        limit=limit or settings.OPSCONSOLE_CLAIM_BATCH, worker=worker, finish_known_sets=True
    )
    claimed_apart = [operation for operation in claimed if operation.state == State.PROCESSING]
    batch = _Batch(claimed_apart, worker=worker)
    for group in _groups(claimed_apart, worker=worker):
        batch.work_through(group)
    if any(operation.ordered == Ordering.IN_ORDER for operation in claimed):
        # A finished in_order version may be what its successor waits for (ledger.intake.ordering).
        with transaction.atomic():
            nudges.request_processing(accepted=1)
    return len(claimed)


# How long the outcomes of concurrent calls are gathered, once one arrived, to record them together.
ARRIVALS_WINDOW_SECONDS = 0.01

# The threads that make external calls live as long as the worker process, so each keeps its HTTP
# client (ledger.actions.http.thread_client), and the kept-alive connections in it, from one batch
# to the next: a batch does not pay a TCP (and TLS) handshake per thread. As many as the most calls
# any one destination may have in flight (the largest max_concurrency); a batch's own limit caps
# what it submits.
_call_threads: ThreadPoolExecutor | None = None
_call_threads_made = threading.Lock()


def call_threads() -> ThreadPoolExecutor:
    global _call_threads
    with _call_threads_made:
        if _call_threads is None:
            size = max((action.max_concurrency for action in registry.values()), default=1)
            _call_threads = ThreadPoolExecutor(max_workers=size, thread_name_prefix="ledger-call")
        return _call_threads


def _forget_call_threads() -> None:
    """A forked worker starts without its parent's threads (they did not come along)."""
    global _call_threads, _call_threads_made
    _call_threads, _call_threads_made = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_call_threads)


@dataclass
class _Group:
    name: str
    operations: list[Operation] = field(default_factory=list)
    # Internal: the action, when it can perform many operations at once.
    action: ActionDefinition | None = None
    # External: calls in flight at once, once one of the group's calls succeeded.
    concurrency: int = 1
    # External: the destination's cluster-wide limits, when it declares any.
    gate: limits.Gate | None = None

    @property
    def widens(self) -> bool:
        return self.action is not None or self.concurrency > 1


def _groups(claimed: list[Operation], *, worker: str) -> list[_Group]:
    groups: dict[str, _Group] = {}
    for operation in claimed:
        try:
            action = get_action(operation.action)
        except UnknownAction:
            group = groups.setdefault(f"alone:{operation.pk}", _Group(f"alone:{operation.pk}"))
        else:
            if action.external:
                name = limits.row_name(action)
                group = groups.setdefault(name, _Group(name, concurrency=action.max_concurrency))
                group.concurrency = min(group.concurrency, action.max_concurrency)
                if group.gate is None and action.limits().any:
                    group.gate = limits.Gate(action, actor=worker)
            else:
                name = f"action:{action.name}"
                group = groups.setdefault(name, _Group(name, action=action if action.performs_many else None))
        group.operations.append(operation)
    return list(groups.values())


class _Batch:
    """A claimed batch being worked through: the operations still waiting (whose leases are
    kept), and the steps taken (the ``mid_batch`` crash point comes before the second)."""

    def __init__(self, claimed: list[Operation], *, worker: str):
        self.worker = worker
        self.waiting = list(claimed)
        self.steps = 0

    def work_through(self, group: _Group) -> None:
        rest, gate = list(group.operations), group.gate
        if gate is not None and (paused_until := gate.admission()):
            self.hold(rest, gate, paused_until)
            return
        known = destination_health.health_of(group.name) if group.widens else None
        # A probe goes alone, whatever the last batches said.
        working = known is not None and known.working(timezone.now()) and not (gate and gate.probing)
        while rest and not working:
            if self.one(rest.pop(0), gate) and group.widens:
                break
            if gate is not None and gate.paused_until:
                self.hold(rest, gate, gate.paused_until)
                rest = []
        if rest and group.action is not None:
            self.as_set(rest, group.action)
        elif rest:
            self.concurrently(rest, group.concurrency, gate)
        if known is not None:
            all_succeeded = all(operation.state == State.SUCCEEDED for operation in group.operations)
            destination_health.record(known, ok=all_succeeded)

    def one(self, operation: Operation, gate: limits.Gate | None = None) -> bool:
        """Perform ``operation`` on its own (under its destination's limits, ``gate``); True when
        it succeeded."""
        self.step()
        gate = gate if gate is not None and _calls(operation) else None
        try:
            keep_leases(self.waiting, worker=self.worker)
            if gate is None:
                perform_claimed(operation, worker=self.worker)
            else:
                self.through_gate(operation, gate)
        except DatabaseError:
            self.database_failed(operation)
        finally:
            self.waiting.remove(operation)
        return operation.state == State.SUCCEEDED

    def through_gate(self, operation: Operation, gate: limits.Gate) -> None:
        """Perform ``operation`` with a slot of its destination, unless the breaker opened while it
        waited for one (then it is given back untried, and so will the rest of the batch be)."""
        with gate.one_call(keep_waiting=self.keep_leases):
            if paused_until := gate.recheck():
                gate.paused_until = paused_until
                limits.hold([operation], gate, paused_until, worker=self.worker)
                return
            perform_claimed(operation, worker=self.worker)
            # Counted before the slot is given back: the next call to take it sees this failure.
            gate.note(failed=limits.failed_try(operation))

    def hold(self, operations: list[Operation], gate: limits.Gate, until) -> None:
        """Give ``operations`` back untried: their destination's calls are paused until ``until``."""
        try:
            limits.hold(operations, gate, until, worker=self.worker)
        except DatabaseError:
            _database_failed("holding %d operations; the sweep will recover them", len(operations))
        finally:
            self.finished(operations)

    def keep_leases(self) -> None:
        try:
            keep_leases(self.waiting, worker=self.worker)
        except DatabaseError:
            _database_failed("renewing the leases of a batch")

    def as_set(self, operations: list[Operation], action: ActionDefinition) -> None:
        together = [operation for operation in operations if not needs_approval(operation, action)]
        if len(together) > 1:
            self.step()
            try:
                keep_leases(self.waiting, worker=self.worker)
                done = perform_internal_set(together, action, worker=self.worker)
            except DatabaseError:
                _database_failed("performing %d operations as a set; one at a time instead", len(together))
                done = False
            if done:
                self.finished(together)
                operations = [operation for operation in operations if operation not in together]
        for operation in operations:
            self.one(operation)

    def concurrently(self, operations: list[Operation], limit: int, gate: limits.Gate | None = None) -> None:
        """Call the destination for ``operations``, at most ``limit`` calls in flight (and no more
        than its ``gate`` lets through). Pool threads make the calls and nothing else; here, on the
        worker's one database connection, tries are begun (their Attempts written) just before
        their calls leave, as many at once as slots are free, and outcomes recorded as they
        arrive, the successes that arrived together at once."""
        queue = deque(operations)
        in_flight: dict[Future, Call] = {}
        pool = call_threads()
        try:
            while queue or in_flight:
                if gate is not None and gate.paused_until and queue:
                    self.hold(list(queue), gate, gate.paused_until)
                    queue.clear()
                wave = self.next_wave(queue, limit - len(in_flight), gate)
                for call in self.begin(wave, gate):
                    in_flight[pool.submit(call_destination, call.action, call.operation)] = call
                if not in_flight:
                    if queue:  # every slot of the destination is another worker's
                        time.sleep(limits.SLOT_WAIT_SECONDS)
                        self.keep_leases()
                    continue
                done, pending = wait(
                    in_flight, timeout=settings.OPSCONSOLE_LEASE_SECONDS / 4, return_when=FIRST_COMPLETED
                )
                if done and pending:
                    # Calls that left together come back within moments of each other: wait that
                    # moment, so their outcomes are recorded (and the next calls begun) together.
                    done |= wait(pending, timeout=ARRIVALS_WINDOW_SECONDS)[0]
                self.keep_leases()
                arrived = [(in_flight.pop(future), future) for future in done]
                if gate is not None:
                    # Counted before their slots are given back: the next call to take one sees them.
                    for _, future in arrived:
                        gate.note(failed=limits.failed_call(future.exception() or future.result()))
                    gate.give_back(len(arrived))
                self.finish(arrived)
        finally:
            if gate is not None:
                gate.give_back_all()

    def next_wave(self, queue: deque, room: int, gate: limits.Gate | None) -> list[Operation]:
        """Up to ``room`` operations from ``queue`` whose calls may leave now, a slot taken for each;
        one that needs an approval it lacks is recorded as failed instead (in ``one``)."""
        wave: list[Operation] = []
        while queue and len(wave) < room:
            operation = queue.popleft()
            if needs_approval(operation, get_action(operation.action)):
                self.one(operation)  # recorded as a failure there
            else:
                wave.append(operation)
        if gate is not None and wave:
            free = gate.take_slots(len(wave))
            queue.extendleft(reversed(wave[free:]))
            wave = wave[:free]
            if wave and (paused_until := gate.recheck()):
                # Opened by another worker since this batch was admitted: the loop holds them all.
                gate.give_back(len(wave))
                queue.extendleft(reversed(wave))
                gate.paused_until, wave = paused_until, []
        return wave

    def begin(self, operations: list[Operation], gate: limits.Gate | None = None) -> Iterator[Call]:
        """Begin the tries of ``operations`` together, or, when the destination is paced, one at a
        time, each at its moment (each yielded as it is begun, so its call leaves then); a slot
        taken for one that was not begun is given back."""
        begun = 0
        if gate is not None and gate.limits.rate_per_second:
            for operation in operations:
                gate.wait_for_turn()
                for call in self.begin_together([operation]):
                    begun += 1
                    yield call
        else:
            for call in self.begin_together(operations):
                begun += 1
                yield call
        if gate is not None:
            gate.give_back(len(operations) - begun)

    def begin_together(self, operations: list[Operation]) -> list[Call]:
        if not operations:
            return []
        self.step()
        try:
            keep_leases(self.waiting, worker=self.worker)
            calls = begin_calls(operations, worker=self.worker)
        except DatabaseError:
            _database_failed("beginning %d calls together; one at a time instead", len(operations))
            calls = None
        if calls is None:
            calls = [call for call in map(self.begin_one, operations) if call is not None]
        begun = {call.operation.pk for call in calls}
        self.finished([operation for operation in operations if operation.pk not in begun])
        return calls

    def begin_one(self, operation: Operation) -> Call | None:
        try:
            return begin_call(operation, get_action(operation.action), worker=self.worker)
        except DatabaseError:
            self.database_failed(operation)
            return None

    def finish(self, arrived: list[tuple[Call, Future]]) -> None:
        successes: list[tuple[Call, Success]] = []
        for call, future in arrived:
            try:
                outcome = future.result()
            except Exception as exc:  # noqa: BLE001  classified in record_failure
                self.finish_one(call, exc)
            else:
                successes.append((call, outcome))
        if len(successes) > 1:
            calls = [call for call, _ in successes]
            try:
                if finish_calls(calls, [success for _, success in successes]):
                    self.finished([call.operation for call in calls])
                    return
            except DatabaseError:
                _database_failed("recording %d successes together; one at a time instead", len(successes))
        for call, success in successes:
            self.finish_one(call, success)

    def finish_one(self, call: Call, outcome: Success | Exception) -> None:
        try:
            finish_call(call, outcome)
        except DatabaseError:
            self.database_failed(call.operation)
        finally:
            self.finished([call.operation])

    def finished(self, operations: list[Operation]) -> None:
        for operation in operations:
            self.waiting.remove(operation)

    def step(self) -> None:
        self.steps += 1
        if self.steps == 2:
            faults.crash_point("mid_batch")

    @staticmethod
    def database_failed(operation: Operation) -> None:
        _database_failed("working on %s; the sweep will recover it", operation.key)


def _calls(operation: Operation) -> bool:
    """Whether performing ``operation`` calls its destination (not refused before, unapproved)."""
    try:
        return not needs_approval(operation, get_action(operation.action))
    except UnknownAction:
        return False


def _database_failed(doing: str, *args) -> None:
    logger.exception("database failure " + doing, *args)
    connection.close_if_unusable_or_obsolete()
