"""Processing: claim due operations, work through them, record each outcome under a fence.

1. ``claim_due_operations``: one short transaction locks due, unpaused operations with
   ``SELECT .. FOR UPDATE SKIP LOCKED`` and moves them to ``processing`` with a lease and a new
   fencing token (the token grows by one with every claim). Those of an internal action known to
   be working are finished right there instead, effects and ``succeeded`` in the claim's own
   transaction (``finish_in_claim``).
2. ``process_due_operations`` works through a claimed batch in groups (internal operations by
   action, external ones by destination), one operation at a time until one of a group succeeds,
   then the rest of the group together: an internal set in one transaction, external calls
   concurrently from a thread pool, capped per destination (``ledger.performing``). Internal
   effects commit with ``succeeded``; an external try's Attempt is written before its request
   leaves, the call runs outside any transaction, and every database write stays in this thread.
3. Every outcome is written (``ledger.recording``) by a guarded UPDATE that also requires the
   claim's token: a worker whose lease expired and whose operation someone else took over changes
   nothing (its completion is refused and audited).

On SQLite the same code is correct: ``FOR UPDATE`` is dropped, but IMMEDIATE transactions
serialise writers, and the guarded updates still decide every race.
"""

import logging
import os
import socket
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import F
from django.utils import timezone

from ledger import audit, contention, faults, health, nudges
from ledger.actions import ActionDefinition, UnknownAction, get_action, registry
from ledger.models import AuditEvent, Operation, Ordering
from ledger.outcomes import Success
from ledger.performing import (
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
from ledger.recording import update_held
from ledger.selectors import due_operations, read_in_index_order
from ledger.states import CLAIMABLE_STATES, State
from ledger.successes import record_claimed_successes

__all__ = ["claim_due_operations", "keep_leases", "perform_claimed", "process_due_operations", "worker_name"]

logger = logging.getLogger("ledger")


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def claim_due_operations(*, limit: int, worker: str, now: datetime | None = None,
                         finish_known_sets: bool = False) -> list[Operation]:
    """Claim up to ``limit`` due operations for ``worker``; returns them with their new tokens.

    Locks: the claimed rows, ``FOR UPDATE SKIP LOCKED`` (other workers pass over them instead of
    waiting). Commits before returning, so no external call ever runs inside the claim's
    transaction.

    With ``finish_known_sets``, internal operations whose action works on sets and is known to be
    working (``ledger.health``) are not claimed and performed apart: their effects, claims and
    ``succeeded`` commit together in this one transaction (``finish_in_claim``), as an internal
    effect commits with its outcome anyway. They are returned too, already succeeded. Such a claim
    reads up to ``OPSCONSOLE_FINISH_IN_CLAIM_BATCH`` due operations (a set finishes in a few
    statements whatever its size) and claims at most ``limit`` of the others.
    """
    now = now or timezone.now()
    # A claim that PostgreSQL aborts for a deadlock leaves nothing (its effects and finished sets
    # included): it is run again at once rather than its operations waiting for the next task.
    finished, healths, claimed = contention.retried(
        _claim_in_one_transaction, limit=limit, worker=worker, now=now, finish_known_sets=finish_known_sets,
        doing="claiming due operations")
    if finished:
        faults.crash_point("after_commit")
        for known in healths:
            health.record(known, ok=True)
    if claimed:
        faults.crash_point("after_claim")
    return finished + claimed


def _claim_in_one_transaction(*, limit: int, worker: str, now: datetime, finish_known_sets: bool):
    reading = max(limit, settings.OPSCONSOLE_FINISH_IN_CLAIM_BATCH) if finish_known_sets else limit
    with transaction.atomic():
        with read_in_index_order():
            found = list(
                # FOR NO KEY UPDATE: keeps other claimers out without blocking the foreign-key checks
                # of an intake that references the row (a duplicate delivery). Those wait at its commit
                # while it holds its workspace's audit chain, which this claim needs next: a deadlock
                # otherwise. Lock order (docs/architecture.md): these rows first, the chain last.
                due_operations(now).select_for_update(skip_locked=True, no_key=True, of=("self",))
                .select_related("workspace").order_by("created_at", "id")[:reading]
            )
        finished, healths = finish_in_claim(found, worker=worker, now=now) if finish_known_sets else ([], [])
        done = {operation.pk for operation in finished}
        claimed = [operation for operation in found if operation.pk not in done][:limit]
        if claimed:
            _claim(claimed, worker=worker, now=now)
    return finished, healths, claimed


def _claim(operations: list[Operation], *, worker: str, now: datetime) -> None:
    lease_expires_at = now + timedelta(seconds=settings.OPSCONSOLE_LEASE_SECONDS)
    # The rows are locked (PostgreSQL) or the whole database is (SQLite's IMMEDIATE
    # transaction), so one guarded UPDATE for the batch is the compare-and-set, and each
    # row's new token is its old one plus one.
    changed = Operation.objects.filter(pk__in=[op.pk for op in operations], state__in=CLAIMABLE_STATES).update(
        state=State.PROCESSING, attempts=F("attempts") + 1, fencing_token=F("fencing_token") + 1,
        lease_owner=worker, lease_expires_at=lease_expires_at, updated_at=now,
    )
    if changed != len(operations):
        raise RuntimeError("claimed rows changed under their lock; the claim is rolled back")
    # Lock order (docs/architecture.md): the rows are the claim's since it found them; the chain last.
    events = []
    for operation in operations:
        events.append(AuditEvent(
            operation=operation, workspace_id=operation.workspace_id, actor=worker, kind="claimed",
            from_state=operation.state, to_state=State.PROCESSING,
            message=f"claim {operation.fencing_token + 1}",
        ))
        operation.state = State.PROCESSING
        operation.attempts += 1
        operation.fencing_token += 1
        operation.lease_owner = worker
        operation.lease_expires_at = lease_expires_at
        operation.updated_at = now
    audit.append(events)


class _Told(Exception):
    """A set's failure, logged already, that leaves nothing finished in the claim."""


def finish_in_claim(found: list[Operation], *, worker: str,
                    now: datetime) -> tuple[list[Operation], list[health.Health]]:
    """Perform, claim and record as succeeded, in the caller's (the claim's) transaction, the
    operations of ``found`` whose internal action works on sets and is known to be working; returns
    them, and the health of their actions (noted after the commit: they worked again). Each
    action's effects are a savepoint: a set whose effect raises leaves nothing, and its operations
    are claimed and worked through as any other, where each meets its failure on its own. The sets
    performed are then recorded together (one more savepoint: if a row is not claimable, none of
    them is finished here). A deadlock is not an action's failure: it aborts the whole claim,
    which the caller runs again. A worker killed here dies inside the transaction: nothing of it
    stays, and its operations are due again at once (no lease to wait out)."""
    sets: dict[str, list[Operation]] = {}
    for operation in found:
        action = registry.get(operation.action)
        if action is not None and not action.external and action.performs_many \
                and not needs_approval(operation, action):
            sets.setdefault(action.name, []).append(operation)
    working = [(name, operations, known) for name, operations in sets.items()
               if (known := health.health_of(f"action:{name}")).working(now)]
    if not working:
        return [], []
    performed: list[tuple[list[Operation], list[Success], health.Health]] = []
    try:
        with transaction.atomic():
            for name, operations, known in working:
                try:
                    # Each set's effects a savepoint of their own when another set may go on without them.
                    with transaction.atomic() if len(working) > 1 else nullcontext():
                        performed.append((operations, get_action(name).perform_many(operations), known))
                except Exception as exc:  # noqa: BLE001  not swallowed: each operation meets it again on its own
                    if contention.contention(exc):
                        raise
                    logger.warning("performing %d %s operations in their claim failed (%s); claiming them instead",
                                   len(operations), name, type(exc).__name__)
                    if len(working) == 1:
                        raise _Told from exc  # no savepoint of its own: the outer one undoes it
            # Lock order (docs/architecture.md): every set's effects (their rows) first, then all of
            # them recorded at once, which takes the audit chain last. Finishing each set in turn
            # would write the next set's effects while holding the chain.
            if performed:
                record_claimed_successes([operation for operations, _, _ in performed for operation in operations],
                                         [success for _, successes, _ in performed for success in successes],
                                         worker=worker, now=now)
                faults.fault_point(faults.IN_CLAIM_POINTS[0])
    except Exception as exc:  # noqa: BLE001  not swallowed: each operation meets it again on its own
        if contention.contention(exc):
            raise  # the whole claim's transaction is aborted: the caller runs it again
        if not isinstance(exc, _Told):
            logger.warning("finishing %d operations in their claim failed (%s); claiming them instead",
                           sum(len(operations) for _, operations, _ in working), type(exc).__name__)
        return [], []
    return ([operation for operations, _, _ in performed for operation in operations],
            [known for _, _, known in performed])


def process_due_operations(*, limit: int | None = None, worker: str | None = None) -> int:
    """Claim one batch and work through it. Returns how many operations were claimed.

    The batch is worked through in groups, in claim order: internal operations by action, external
    ones by destination. A group whose actions are not known to work goes one operation at a time
    until one of them succeeds; then (or at once, when the last batches that met them, on any
    worker, all succeeded: ``ledger.health``) the rest of an internal group whose action has ``perform_many``
    completes as one set (one transaction; if it cannot commit, they go one at a time, which also
    refuses a stale claim properly), and the rest of an external group calls its destination
    concurrently, at most its ``max_concurrency`` in flight. An action or a destination that is
    failing thus meets the batch one operation at a time, as it did before sets and concurrency;
    and a worker that dies at a cold destination's first call has one request in flight, not a
    pool's worth.

    A database failure while one operation is worked on (its outcome could not be recorded even
    on a fresh connection) is logged and leaves that operation to the sweep; the rest of the
    batch goes on, so their claims do not sit out their leases.
    """
    worker = worker or worker_name()
    claimed = claim_due_operations(limit=limit or settings.OPSCONSOLE_CLAIM_BATCH, worker=worker,
                                   finish_known_sets=True)
    claimed_apart = [operation for operation in claimed if operation.state == State.PROCESSING]
    batch = _Batch(claimed_apart, worker=worker)
    for group in _groups(claimed_apart):
        batch.work_through(group)
    if any(operation.ordered == Ordering.IN_ORDER for operation in claimed):
        # A finished in_order version may be what its successor waits for (ledger.ordering).
        with transaction.atomic():
            nudges.request_processing(accepted=1)
    return len(claimed)


def keep_leases(remaining: list[Operation], *, worker: str) -> None:
    """Renew the leases of a batch's remaining operations once half a lease has passed.

    A batch of slow external calls must not outlive its own claims: otherwise the sweep would hand
    the operations still waiting in this batch to another worker. One UPDATE, guarded per row by
    the claim's fencing token; a row someone else took over keeps its lease.
    """
    lease = timedelta(seconds=settings.OPSCONSOLE_LEASE_SECONDS)
    now = timezone.now()
    if not remaining or now < min(operation.lease_expires_at for operation in remaining) - lease / 2:
        return
    update_held(remaining, lease_expires_at=now + lease)
    for operation in remaining:
        operation.lease_expires_at = now + lease


# How long the outcomes of concurrent calls are gathered, once one arrived, to record them together.
ARRIVALS_WINDOW_SECONDS = 0.01


@dataclass
class _Group:
    name: str
    operations: list[Operation] = field(default_factory=list)
    # Internal: the action, when it can perform many operations at once.
    action: ActionDefinition | None = None
    # External: calls in flight at once, once one of the group's calls succeeded.
    concurrency: int = 1

    @property
    def widens(self) -> bool:
        return self.action is not None or self.concurrency > 1


def _groups(claimed: list[Operation]) -> list[_Group]:
    groups: dict[str, _Group] = {}
    for operation in claimed:
        try:
            action = get_action(operation.action)
        except UnknownAction:
            group = groups.setdefault(f"alone:{operation.pk}", _Group(f"alone:{operation.pk}"))
        else:
            if action.external:
                name = f"destination:{action.destination_name()}"
                group = groups.setdefault(name, _Group(name, concurrency=action.max_concurrency))
                group.concurrency = min(group.concurrency, action.max_concurrency)
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
        rest = list(group.operations)
        known = health.health_of(group.name) if group.widens else None
        working = known is not None and known.working(timezone.now())
        while rest and not working:
            if self.one(rest.pop(0)) and group.widens:
                break
        if rest and group.action is not None:
            self.as_set(rest, group.action)
        elif rest:
            self.concurrently(rest, group.concurrency)
        if known is not None:
            health.record(known, ok=all(operation.state == State.SUCCEEDED for operation in group.operations))

    def one(self, operation: Operation) -> bool:
        """Perform ``operation`` on its own; True when it succeeded."""
        self.step()
        try:
            keep_leases(self.waiting, worker=self.worker)
            perform_claimed(operation, worker=self.worker)
        except DatabaseError:
            self.database_failed(operation)
        finally:
            self.waiting.remove(operation)
        return operation.state == State.SUCCEEDED

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

    def concurrently(self, operations: list[Operation], limit: int) -> None:
        """Call the destination for ``operations``, at most ``limit`` calls in flight. Pool threads
        make the calls and nothing else; here, on the worker's one database connection, tries are
        begun (their Attempts written) just before their calls leave, as many at once as slots are
        free, and outcomes recorded as they arrive, the successes that arrived together at once."""
        queue = deque(operations)
        in_flight: dict[Future, Call] = {}
        with ThreadPoolExecutor(max_workers=min(limit, len(operations)), thread_name_prefix="ledger-call") as pool:
            while queue or in_flight:
                wave = []
                while queue and len(in_flight) + len(wave) < limit:
                    operation = queue.popleft()
                    if needs_approval(operation, get_action(operation.action)):
                        self.one(operation)  # recorded as a failure there
                    else:
                        wave.append(operation)
                for call in self.begin(wave):
                    in_flight[pool.submit(call_destination, call.action, call.operation)] = call
                if not in_flight:
                    continue
                done, pending = wait(in_flight, timeout=settings.OPSCONSOLE_LEASE_SECONDS / 4,
                                     return_when=FIRST_COMPLETED)
                if done and pending:
                    # Calls that left together come back within moments of each other: wait that
                    # moment, so their outcomes are recorded (and the next calls begun) together.
                    done |= wait(pending, timeout=ARRIVALS_WINDOW_SECONDS)[0]
                try:
                    keep_leases(self.waiting, worker=self.worker)
                except DatabaseError:
                    _database_failed("renewing the leases of a batch")
                self.finish([(in_flight.pop(future), future) for future in done])

    def begin(self, operations: list[Operation]) -> list[Call]:
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


def _database_failed(doing: str, *args) -> None:
    logger.exception("database failure " + doing, *args)
    connection.close_if_unusable_or_obsolete()
