"""Processing: claim due operations, perform their effect, record the outcome under a fence.

1. ``claim_due_operations``: one short transaction locks due, unpaused operations with
   ``SELECT .. FOR UPDATE SKIP LOCKED`` and moves them to ``processing`` with a lease and a new
   fencing token (the token grows by one with every claim).
2. ``perform_claimed``: internal actions write their effect in the same transaction that records
   ``succeeded``; external actions record the start of an attempt, call the destination outside
   any transaction, then record the outcome.
3. Every outcome is written by a guarded UPDATE that also requires the claim's token: a worker
   whose lease expired and whose operation someone else took over changes nothing (its completion
   is refused and audited).

On SQLite the same code is correct: ``FOR UPDATE`` is dropped, but IMMEDIATE transactions
serialise writers, and the guarded updates still decide every race.
"""

import logging
import os
import socket
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from ledger import faults, nudges
from ledger.actions import ActionDefinition, UnknownAction, get_action
from ledger.models import Attempt, AuditEvent, Operation
from ledger.outcomes import AmbiguousError, OutcomeError, PermanentError, Success, TransientError
from ledger.retry import retry_delay
from ledger.selectors import due_operations
from ledger.services import record_audit_event, transition_operation
from ledger.states import CLAIMABLE_STATES, State

logger = logging.getLogger("ledger")

RETRY_BUDGET_WINDOW = timedelta(hours=1)


class _StaleClaim(Exception):
    """The claim's fencing token no longer matches: someone else owns the operation now."""


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
            due_operations(now).select_for_update(skip_locked=True, of=("self",))
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
        AuditEvent.objects.bulk_create(events)
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
        _record_failure(operation, None, PermanentError(f"action {operation.action!r} is not registered"),
                        started_at=timezone.now(), worker=worker)
        return
    if action.consequential and not operation.approved_as_is():
        # Defence in depth: the state machine already keeps unapproved work out of `pending`.
        _record_failure(operation, action, PermanentError("no approval covers this payload"),
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
            attempt = _attempt(operation, worker=worker, started_at=started_at, outcome=Attempt.Outcome.OK,
                               external_id=success.external_id)
            _record_success(operation, success, attempt=attempt, worker=worker, token=token)
            faults.fault_point("before_outcome_commit")

    try:
        # Safe to run twice: a transaction that did not commit took its effect with it.
        _commit_outcome(operation, perform_and_record)
    except _StaleClaim:
        # The effect was rolled back with the refused outcome: nothing happened twice.
        _refuse_stale(operation, worker=worker, token=token, started_at=started_at)
        return
    except Exception as exc:  # noqa: BLE001  classified below, never swallowed: recorded and logged
        _record_failure(operation, action, exc, started_at=started_at, worker=worker)
        return
    faults.crash_point("after_commit")


def _perform_external(operation: Operation, action: ActionDefinition, *, worker: str) -> None:
    token = operation.fencing_token
    started_at = timezone.now()
    attempt = _begin_attempt(operation, action, worker=worker, started_at=started_at)
    if attempt is None:
        _refuse_stale(operation, worker=worker, token=token, started_at=started_at, begun=False)
        return
    try:
        success = action.perform(operation)  # outside any transaction: this is the network call
    except Exception as exc:  # noqa: BLE001  classified in _record_failure
        _record_failure(operation, action, exc, started_at=started_at, worker=worker, attempt=attempt)
        return
    faults.crash_point("after_external_call")  # the destination acted; we have not recorded it
    # Kept on the attempt even if the outcome is refused as stale: reconciliation can use it.
    attempt.external_id = success.external_id

    def record():
        with transaction.atomic():
            finish_attempt(attempt, Attempt.Outcome.OK)
            _record_success(operation, success, attempt=attempt, worker=worker, token=token)
            faults.fault_point("before_outcome_commit")

    try:
        # The destination acted: if the database loses this write, it is written again rather than
        # left to the lease (whose expiry would make the operation unknown and cost a lookup).
        _commit_outcome(operation, record)
    except _StaleClaim:
        _refuse_stale(operation, worker=worker, token=token, started_at=started_at, attempt=attempt)


# What the engine changes on an operation while a claim holds it.
_ENGINE_FIELDS = ("state", "attempts", "fencing_token", "lease_owner", "lease_expires_at", "next_attempt_at",
                  "deadline", "result", "external_id", "last_error_category", "last_error_message", "updated_at")


def _commit_outcome(operation: Operation, write):
    """Run ``write``, the transaction that records this claim's outcome, and keep the operation in
    memory true to the database whatever happens to it.

    ``transition_operation`` applies a move to the object as soon as its UPDATE ran; if the
    transaction then fails (a terminated connection, at the commit or before), the object would
    claim a state the database never stored, and the next step would start from it (``succeeded
    -> retrying``). So a failed ``write`` leaves the object as it was before. When the failure was
    the connection itself, the database is asked on a fresh connection: if the row is still ours
    and unrecorded, ``write`` runs once more; if it moved (the commit went through after all, or
    the claim was lost), the object is reloaded and there is nothing left to write.
    """
    token = operation.fencing_token
    before = {name: getattr(operation, name) for name in _ENGINE_FIELDS}
    try:
        return write()
    except (OperationalError, InterfaceError):
        _restore(operation, before)
        logger.warning("database connection lost recording the outcome of %s; writing it again",
                       operation.key, exc_info=True)
    except BaseException:
        _restore(operation, before)
        raise
    connection.close_if_unusable_or_obsolete()
    if not Operation.objects.filter(pk=operation.pk, state=State.PROCESSING, fencing_token=token).exists():
        operation.refresh_from_db(fields=_ENGINE_FIELDS)
        return None
    try:
        return write()
    except BaseException:
        _restore(operation, before)
        raise


def _restore(operation: Operation, values: dict) -> None:
    for name, value in values.items():
        setattr(operation, name, value)


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


def _attempt(operation, *, worker, started_at, outcome, error: Exception | None = None,
             external_id: str = "") -> Attempt:
    return Attempt.objects.create(
        operation=operation, number=operation.attempts, fencing_token=operation.fencing_token,
        worker=worker, started_at=started_at, finished_at=timezone.now(), outcome=outcome,
        external_id=external_id, **_error_fields(error),
    )


def finish_attempt(attempt: Attempt, outcome: str, error: Exception | None = None) -> None:
    attempt.finished_at = timezone.now()
    attempt.outcome = outcome
    for name, value in _error_fields(error).items():
        setattr(attempt, name, value)
    attempt.save(update_fields=["finished_at", "outcome", "error_type", "error_message", "http_status",
                                "external_id"])


def _error_fields(error: Exception | None) -> dict:
    if error is None:
        return {}
    return {
        "error_type": type(error).__qualname__[:200],
        "error_message": _short_message(error),
        "http_status": getattr(error, "http_status", None),
    }


def _short_message(error: Exception) -> str:
    return (getattr(error, "message", None) or str(error) or type(error).__name__)[:500]


def _record_success(operation, success: Success, *, attempt, worker, token) -> None:
    done = transition_operation(
        operation, to_state=State.SUCCEEDED, actor=worker, kind="succeeded", fencing_token=token,
        attempt=attempt, result=success.result, external_id=success.external_id,
        lease_owner="", lease_expires_at=None, next_attempt_at=None,
        last_error_category="", last_error_message="",
    )
    if not done:
        raise _StaleClaim


def _classify(error: Exception, action: ActionDefinition | None) -> OutcomeError:
    if isinstance(error, OutcomeError):
        return error
    message = f"unexpected {type(error).__name__}"
    if action is not None and action.external:
        # We cannot tell whether an unexpected failure happened before or after the request
        # left: treat it as ambiguous (reconcile before retrying), never as a clean failure.
        return AmbiguousError(message)
    # Inside our own transaction the effect was rolled back, so trying again is safe.
    return TransientError(message)


def _record_failure(operation, action, error: Exception, *, started_at, worker, attempt=None) -> None:
    outcome_error = _classify(error, action)
    if not isinstance(error, OutcomeError):
        logger.exception("unexpected error performing %s", operation.key, exc_info=error)
    category = outcome_error.category
    token = operation.fencing_token

    def record():
        to_state, fields, reason = _next_state_after(operation, action, outcome_error)
        with transaction.atomic():
            if attempt is None:
                row = _attempt(operation, worker=worker, started_at=started_at, outcome=category, error=error)
            else:
                finish_attempt(attempt, category, error)
                row = attempt
            if not transition_operation(
                operation, to_state=to_state, actor=worker, kind=_failure_kind(to_state),
                fencing_token=token, attempt=row, error_category=category, message=reason,
                last_error_category=category, last_error_message=reason[:500],
                lease_owner="", lease_expires_at=None, **fields,
            ):
                raise _StaleClaim
            # Wake a worker when the retry is due, or the reconciler when the lookup is, rather
            # than when the sweep or the reconcile schedule next looks.
            if to_state == State.RETRYING:
                transaction.on_commit(partial(nudges.enqueue_processing, operation.pk, at=fields["next_attempt_at"]))
            elif to_state == State.UNKNOWN:
                transaction.on_commit(partial(nudges.enqueue_lookup, operation.pk, at=fields["next_attempt_at"]))

    try:
        _commit_outcome(operation, record)
    except _StaleClaim:
        # An external try's attempt row was begun under this claim: that one is marked stale (a
        # second row for the same claim would break attempt_one_per_claim).
        _refuse_stale(operation, worker=worker, token=token, started_at=started_at, attempt=attempt)


def _failure_kind(to_state: State) -> str:
    return {State.RETRYING: "retry_scheduled", State.UNKNOWN: "outcome_unknown",
            State.NEEDS_REVIEW: "needs_review"}[to_state]


def _next_state_after(operation, action, error: OutcomeError) -> tuple[State, dict, str]:
    """Where a failed try leads: (state, extra fields, reason for people)."""
    message = _short_message(error)
    if action is None or isinstance(error, PermanentError):
        return State.NEEDS_REVIEW, {"next_attempt_at": None}, f"permanent: {message}"
    retry_allowed = operation.attempts < action.max_attempts
    if isinstance(error, AmbiguousError):
        if action.honours_idempotency_keys and retry_allowed:
            # The destination deduplicates by our key, so the same key can safely be sent again.
            return _retry_or_review(operation, action, error, f"ambiguous, retry with same key: {message}")
        # Unknown: reconciliation asks the destination once the request can no longer land.
        return State.UNKNOWN, {"next_attempt_at": timezone.now() + action.settle_after}, f"ambiguous: {message}"
    if not retry_allowed:
        limit = f"{operation.attempts} of {action.max_attempts}"
        return State.NEEDS_REVIEW, {"next_attempt_at": None}, f"attempt limit reached ({limit}): {message}"
    return _retry_or_review(operation, action, error, f"transient: {message}")


def _retry_or_review(operation, action, error: OutcomeError, reason: str) -> tuple[State, dict, str]:
    now = timezone.now()
    delay = retry_delay(operation.attempts, base=action.backoff_base_seconds, cap=action.backoff_cap_seconds,
                        retry_after=getattr(error, "retry_after", None))
    next_attempt_at = now + timedelta(seconds=delay)
    budget_frees_at = _retry_budget_frees_at(operation.workspace, now)
    if budget_frees_at and budget_frees_at > next_attempt_at:
        next_attempt_at = budget_frees_at
        reason += f" (workspace retry budget spent; waits until {budget_frees_at:%H:%M:%S})"
    if operation.deadline and next_attempt_at > operation.deadline:
        return State.NEEDS_REVIEW, {"next_attempt_at": None}, f"processing deadline passed: {reason}"
    return State.RETRYING, {"next_attempt_at": next_attempt_at}, reason


def _retry_budget_frees_at(workspace, now) -> datetime | None:
    """When the workspace may schedule its next retry, if its hourly budget is spent now."""
    window_start = now - RETRY_BUDGET_WINDOW
    recent = AuditEvent.objects.filter(
        workspace=workspace, kind="retry_scheduled", created_at__gt=window_start
    ).order_by("-created_at").values_list("created_at", flat=True)
    budget = workspace.retry_budget_per_hour
    if budget == 0:
        return now + RETRY_BUDGET_WINDOW  # no budget at all: every retry waits a full window
    spent = list(recent[:budget])
    if len(spent) < budget:
        return None
    # The budget frees when the oldest of the last `budget` retries leaves the window.
    return spent[-1] + RETRY_BUDGET_WINDOW


def _refuse_stale(operation, *, worker, token, started_at, attempt=None, begun=True) -> None:
    """Audit a completion that arrived after the claim was lost; apply nothing."""
    with transaction.atomic():
        if attempt is not None:
            finish_attempt(attempt, Attempt.Outcome.STALE)
        elif begun:
            _attempt(operation, worker=worker, started_at=started_at, outcome=Attempt.Outcome.STALE)
        record_audit_event(
            actor=worker, kind="stale_completion_refused", operation=operation,
            message=f"claim {token} no longer holds the operation; outcome not applied",
        )
    logger.warning("stale completion refused for %s (claim %s)", operation.key, token)
