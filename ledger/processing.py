"""Processing: claim due operations, perform their effect, record the outcome under a fence.

1. ``claim_due_operations``: one short transaction locks due, unpaused operations with
   ``SELECT .. FOR UPDATE SKIP LOCKED`` and moves them to ``processing`` with a lease and a new
   fencing token (the token grows by one with every claim).
2. ``perform_claimed``: internal actions write their effect in the same transaction that records
   ``succeeded``; external actions record the start of an attempt, call the destination outside
   any transaction, then record the outcome.
3. Every outcome is written (``ledger.recording``) by a guarded UPDATE that also requires the
   claim's token: a worker whose lease expired and whose operation someone else took over changes
   nothing (its completion is refused and audited).

On SQLite the same code is correct: ``FOR UPDATE`` is dropped, but IMMEDIATE transactions
serialise writers, and the guarded updates still decide every race.
"""

import logging
import os
import socket
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from ledger import audit, faults
from ledger.actions import ActionDefinition, UnknownAction, get_action
from ledger.models import Attempt, AuditEvent, Operation
from ledger.outcomes import PermanentError
from ledger.recording import (
    StaleClaim,
    commit_outcome,
    finish_attempt,
    new_attempt,
    record_failure,
    record_success,
    refuse_stale,
)
from ledger.selectors import due_operations
from ledger.states import CLAIMABLE_STATES, State

logger = logging.getLogger("ledger")

def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def claim_due_operations(*, limit: int, worker: str, now: datetime | None = None) -> list[Operation]:
    """Claim up to ``limit`` due operations for ``worker``; returns them with their new tokens.

    Locks: the claimed rows, ``FOR UPDATE SKIP LOCKED`` (other workers pass over them instead of
    waiting). Commits before returning, so no effect ever runs inside the claim's transaction.
    """
    now = now or timezone.now()
    lease_expires_at = now + timedelta(seconds=settings.OPSCONSOLE_LEASE_SECONDS)
    with transaction.atomic():
        claimed = list(
            # FOR NO KEY UPDATE: keeps other claimers out without blocking the foreign-key checks of
            # an intake that references the row (a duplicate delivery). Those wait at its commit while
            # it holds its workspace's audit chain, which this claim needs next: a deadlock otherwise.
            due_operations(now).select_for_update(skip_locked=True, no_key=True, of=("self",))
            .select_related("workspace").order_by("id")[:limit]
        )
        if not claimed:
            return []
        # The rows are locked (PostgreSQL) or the whole database is (SQLite's IMMEDIATE
        # transaction), so one guarded UPDATE for the batch is the compare-and-set, and each
        # row's new token is its old one plus one.
        changed = Operation.objects.filter(pk__in=[op.pk for op in claimed], state__in=CLAIMABLE_STATES).update(
            state=State.PROCESSING, attempts=F("attempts") + 1, fencing_token=F("fencing_token") + 1,
            lease_owner=worker, lease_expires_at=lease_expires_at, updated_at=now,
        )
        if changed != len(claimed):
            raise RuntimeError("claimed rows changed under their lock; the claim is rolled back")
        events = []
        for operation in claimed:
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
    faults.crash_point("after_claim")
    return claimed


def process_due_operations(*, limit: int | None = None, worker: str | None = None) -> int:
    """Claim one batch and perform it. Returns how many operations were claimed.

    A database failure while one operation is worked on (its outcome could not be recorded even
    on a fresh connection) is logged and leaves that operation to the sweep; the rest of the
    batch goes on, so their claims do not sit out their leases.
    """
    worker = worker or worker_name()
    claimed = claim_due_operations(limit=limit or settings.OPSCONSOLE_CLAIM_BATCH, worker=worker)
    for index, operation in enumerate(claimed):
        if index == 1:
            faults.crash_point("mid_batch")
        try:
            keep_leases(claimed[index:], worker=worker)
            perform_claimed(operation, worker=worker)
        except DatabaseError:
            logger.exception("database failure working on %s; the sweep will recover it", operation.key)
            connection.close_if_unusable_or_obsolete()
    return len(claimed)


def keep_leases(remaining: list[Operation], *, worker: str) -> None:
    """Renew the leases of a batch's remaining operations once half a lease has passed.

    A batch of slow external calls must not outlive its own claims: otherwise the sweep would hand
    the operations still waiting in this batch to another worker. One UPDATE, guarded per row by
    the claim's fencing token; a row someone else took over keeps its lease.
    """
    lease = timedelta(seconds=settings.OPSCONSOLE_LEASE_SECONDS)
    now = timezone.now()
    if not remaining or now < remaining[0].lease_expires_at - lease / 2:
        return
    ours = Q()
    for operation in remaining:
        ours |= Q(pk=operation.pk, fencing_token=operation.fencing_token)
    Operation.objects.filter(ours, state=State.PROCESSING).update(lease_expires_at=now + lease)
    for operation in remaining:
        operation.lease_expires_at = now + lease


def perform_claimed(operation: Operation, *, worker: str) -> None:
    """Perform one claimed operation and record its outcome (guarded by the claim's token)."""
    try:
        action = get_action(operation.action)
    except UnknownAction:
        record_failure(operation, None, PermanentError(f"action {operation.action!r} is not registered"),
                        started_at=timezone.now(), worker=worker)
        return
    if action.consequential and not operation.approved_as_is():
        # Defence in depth: the state machine already keeps unapproved work out of `pending`.
        record_failure(operation, action, PermanentError("no approval covers this payload"),
                        started_at=timezone.now(), worker=worker)
        return
    if action.external:
        _perform_external(operation, action, worker=worker)
    else:
        _perform_internal(operation, action, worker=worker)


def _perform_internal(operation: Operation, action: ActionDefinition, *, worker: str) -> None:
    token = operation.fencing_token
    started_at = timezone.now()

    def perform_and_record():
        with transaction.atomic():
            success = action.perform(operation)
            attempt = new_attempt(operation, worker=worker, started_at=started_at, outcome=Attempt.Outcome.OK,
                               external_id=success.external_id)
            record_success(operation, success, attempt=attempt, worker=worker, token=token)
            faults.fault_point("before_outcome_commit")

    try:
        # Safe to run twice: a transaction that did not commit took its effect with it.
        commit_outcome(operation, perform_and_record)
    except StaleClaim:
        # The effect was rolled back with the refused outcome: nothing happened twice.
        refuse_stale(operation, worker=worker, token=token, started_at=started_at)
        return
    except Exception as exc:  # noqa: BLE001  classified below, never swallowed: recorded and logged
        record_failure(operation, action, exc, started_at=started_at, worker=worker)
        return
    faults.crash_point("after_commit")


def _perform_external(operation: Operation, action: ActionDefinition, *, worker: str) -> None:
    token = operation.fencing_token
    started_at = timezone.now()
    attempt = _begin_attempt(operation, action, worker=worker, started_at=started_at)
    if attempt is None:
        refuse_stale(operation, worker=worker, token=token, started_at=started_at, begun=False)
        return
    try:
        success = action.perform(operation)  # outside any transaction: this is the network call
    except Exception as exc:  # noqa: BLE001  classified in record_failure
        record_failure(operation, action, exc, started_at=started_at, worker=worker, attempt=attempt)
        return
    faults.crash_point("after_external_call")  # the destination acted; we have not recorded it
    # Kept on the attempt even if the outcome is refused as stale: reconciliation can use it.
    attempt.external_id = success.external_id

    def record():
        with transaction.atomic():
            finish_attempt(attempt, Attempt.Outcome.OK)
            record_success(operation, success, attempt=attempt, worker=worker, token=token)
            faults.fault_point("before_outcome_commit")

    try:
        # The destination acted: if the database loses this write, it is written again rather than
        # left to the lease (whose expiry would make the operation unknown and cost a lookup).
        commit_outcome(operation, record)
    except StaleClaim:
        refuse_stale(operation, worker=worker, token=token, started_at=started_at, attempt=attempt)


def _begin_attempt(operation, action, *, worker, started_at) -> Attempt | None:
    """Record that a try is about to reach the destination, and renew the lease for it."""
    lease_expires_at = started_at + timedelta(seconds=settings.OPSCONSOLE_LEASE_SECONDS)
    with transaction.atomic():
        renewed = Operation.objects.filter(
            pk=operation.pk, state=State.PROCESSING, fencing_token=operation.fencing_token
        ).update(lease_expires_at=lease_expires_at)
        if not renewed:
            return None
        operation.lease_expires_at = lease_expires_at
        return Attempt.objects.create(
            operation=operation, number=operation.attempts, fencing_token=operation.fencing_token,
            worker=worker, started_at=started_at,
            idempotency_key=operation.key if action.honours_idempotency_keys else "",
        )
