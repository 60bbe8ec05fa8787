"""Claiming: one short transaction locks due, unpaused operations with ``SELECT .. FOR UPDATE SKIP
LOCKED`` and moves them to ``processing`` with a lease and a new fencing token (the token grows by
one with every claim). Those of an internal action known to be working are finished right there
instead, effects and ``succeeded`` in the claim's own transaction (``finish_in_claim``). A worker
that keeps working past half its lease extends it (``keep_leases``).
"""

import logging
import os
import socket
from collections.abc import Sequence
from contextlib import nullcontext
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ledger.actions import get_action, registry
from ledger.core import contention
from ledger.core.held_time import HeldOperation, with_held_time
from ledger.core.selectors import due_operations, read_in_index_order
from ledger.core.transitions import transition_many
from ledger.engine import destination_health, faults
from ledger.engine.fencing import renew_leases
from ledger.engine.performing import (
    needs_approval,
)
from ledger.engine.succeeded import record_claimed_successes
from ledger.models import Operation
from ledger.outcomes import Success
from ledger.states import State

logger = logging.getLogger("ledger")


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def claim_due_operations(
    *, limit: int, worker: str, now: datetime | None = None, finish_known_sets: bool = False
) -> list[Operation]:
    """Claim up to ``limit`` due operations for ``worker``; returns them with their new tokens.

    Locks: the claimed rows, ``FOR UPDATE SKIP LOCKED`` (other workers pass over them instead of
    waiting). Commits before returning, so no external call ever runs inside the claim's
    transaction.

    With ``finish_known_sets``, internal operations whose action works on sets and is known to be
    working (``ledger.engine.destination_health``) are not claimed and performed apart: their effects, claims and
    ``succeeded`` commit together in this one transaction (``finish_in_claim``), as an internal
    effect commits with its outcome anyway. They are returned too, already succeeded. Such a claim
    reads up to ``OPSCONSOLE_FINISH_IN_CLAIM_BATCH`` due operations (a set finishes in a few
    statements whatever its size) and claims at most ``limit`` of the others.
    """
    now = now or timezone.now()
    # A claim that PostgreSQL aborts for a deadlock leaves nothing (its effects and finished sets
    # included): it is run again at once rather than its operations waiting for the next task.
    finished, healths, claimed = contention.retried(
        _claim_in_one_transaction,
        limit=limit,
        worker=worker,
        now=now,
        finish_known_sets=finish_known_sets,
        doing="claiming due operations",
    )
    if finished:
        faults.crash_point("after_commit")
        for known in healths:
            destination_health.record(known, ok=True)
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
                with_held_time(due_operations(now))
                .select_for_update(skip_locked=True, no_key=True, of=("self",))
                .select_related("workspace")
                .order_by("created_at", "id")[:reading]
            )
        finished, healths = finish_in_claim(found, worker=worker, now=now) if finish_known_sets else ([], [])
        done = {operation.pk for operation in finished}
        claimed = [operation for operation in found if operation.pk not in done][:limit]
        if claimed:
            _claim(claimed, worker=worker, now=now)
    return finished, healths, claimed


class ClaimChanged(RuntimeError):
    """A row the claim holds locked was not claimable under its state and token: only a bug could
    do that; the claim is rolled back."""


def _claim(operations: list[HeldOperation], *, worker: str, now: datetime) -> None:
    """Move the found rows to processing, each under a new fencing token (its old one plus one)
    and a lease, with the time a pause held it given to its deadline (``with_held_time``): one
    guarded UPDATE (``transition_many``). The rows are locked since they were found, so every
    guard matches; one that does not rolls the claim back (``ClaimChanged``)."""
    transition_many(
        operations,
        to_state=State.PROCESSING,
        actor=worker,
        kind="claimed",
        same={"lease_owner": worker, "lease_expires_at": now + timedelta(seconds=settings.OPSCONSOLE_LEASE_SECONDS)},
        each={"deadline": [operation.held_deadline for operation in operations]},
        increment=("attempts", "fencing_token"),
        tokens=[operation.fencing_token for operation in operations],
        message=[f"claim {operation.fencing_token + 1}" for operation in operations],
        raise_if_any_stays=ClaimChanged,
        now=now,
    )


class _Told(Exception):
    """A set's failure, logged already, that leaves nothing finished in the claim."""


def finish_in_claim(
    found: Sequence[Operation], *, worker: str, now: datetime
) -> tuple[list[Operation], list[destination_health.Health]]:
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
        if (
            action is not None
            and not action.external
            and action.performs_many
            and not needs_approval(operation, action)
        ):
            sets.setdefault(action.name, []).append(operation)
    working = [
        (name, operations, known)
        for name, operations in sets.items()
        if (known := destination_health.health_of(f"action:{name}")).working(now)
    ]
    if not working:
        return [], []
    performed: list[tuple[list[Operation], list[Success], destination_health.Health]] = []
    try:
        with transaction.atomic():
            for name, operations, known in working:
                try:
                    # Each set's effects a savepoint of their own when another set may go on without them.
                    with transaction.atomic() if len(working) > 1 else nullcontext():
                        performed.append((operations, get_action(name).perform_many(operations), known))
                except Exception as exc:  # not swallowed: each operation meets it again on its own
                    if contention.contention(exc):
                        raise
                    logger.warning(
                        "performing %d %s operations in their claim failed (%s); claiming them instead",
                        len(operations),
                        name,
                        type(exc).__name__,
                    )
                    if len(working) == 1:
                        raise _Told from exc  # no savepoint of its own: the outer one undoes it
            # Lock order (docs/architecture.md): every set's effects (their rows) first, then all of
            # them recorded at once, which takes the audit chain last. Finishing each set in turn
            # would write the next set's effects while holding the chain.
            if performed:
                record_claimed_successes(
                    [operation for operations, _, _ in performed for operation in operations],
                    [success for _, successes, _ in performed for success in successes],
                    worker=worker,
                    now=now,
                )
                faults.fault_point(faults.IN_CLAIM_POINTS[0])
    except Exception as exc:  # not swallowed: each operation meets it again on its own
        if contention.contention(exc):
            raise  # the whole claim's transaction is aborted: the caller runs it again
        if not isinstance(exc, _Told):
            logger.warning(
                "finishing %d operations in their claim failed (%s); claiming them instead",
                sum(len(operations) for _, operations, _ in working),
                type(exc).__name__,
            )
        return [], []
    return (
        [operation for operations, _, _ in performed for operation in operations],
        [known for _, _, known in performed],
    )


def keep_leases(remaining: list[Operation], *, worker: str) -> None:
    """Renew the leases of a batch's remaining operations once half a lease has passed.

    A batch of slow external calls must not outlive its own claims: otherwise the sweep would hand
    the operations still waiting in this batch to another worker. One UPDATE, guarded per row by
    the claim's fencing token; a row someone else took over keeps its lease.
    """
    lease = timedelta(seconds=settings.OPSCONSOLE_LEASE_SECONDS)
    now = timezone.now()
    # A claimed operation always has a lease (its expiry is set by the claim).
    if not remaining or now < min(op.lease_expires_at for op in remaining if op.lease_expires_at) - lease / 2:
        return
    renew_leases(remaining, expires_at=now + lease)
    for operation in remaining:
        operation.lease_expires_at = now + lease
