"""Leases and deadlines that expire: a lease whose holder stopped (a worker killed, a caller that never reported) goes
back to work counted as what it was, or to ``unknown`` where its try may have acted; due work past
its processing deadline goes to review. The sweep finds both every minute; a caller's claim
(``ledger.callers``) meets them at once.
"""

from datetime import datetime
from functools import partial

from django.db import transaction

from ledger.actions import UnknownAction, get_action
from ledger.core import nudges
from ledger.core.transitions import LEASE_EXPIRED, transition_operation
from ledger.engine.attempts import finish_attempt
from ledger.models import Attempt, Operation
from ledger.states import State

# Why a caller-performed operation whose caller never reported is unknown (its queue group).
CALLER_SILENT = "the caller reported no outcome before its lease expired"
# Why an internal operation whose worker died holding it, try after try, stops for review.
WORKER_STOPPED = "the worker stopped before it recorded an outcome (its lease expired)"


def recover_expired_lease(operation: Operation, now: datetime, *, actor: str = "sweep") -> bool:
    """An expired claim back to work, counted as what it was.

    - An external try that began (its open Attempt) may have reached the destination: unknown, the
      attempt abandoned; reconciliation asks the destination.
    - An external claim that began no try (a call opens its Attempt first) was no attempt: pending,
      and the claim gives back the count it took, so lease expiries do not spend ``max_attempts``.
    - A caller's claim (``ledger.callers``) began its try when it was claimed: the caller may have
      acted, so it is unknown too, never claimable again by itself; a lookup or a person decides.
    - An internal claim was a try: its effect ran in the worker's transaction and died with it,
      leaving no row. It keeps its count (the operation page says how many tries left no row), so
      an action that kills its worker every time stops at ``max_attempts``, for review, instead of
      being claimed again until its deadline.
    """
    token = operation.fencing_token
    open_attempt = Attempt.objects.filter(operation=operation, fencing_token=token, finished_at__isnull=True).first()
    action = _action_or_none(operation.action)
    external = action is not None and action.external
    reached_destination = external and open_attempt is not None
    message = f"lease of {operation.lease_owner or 'a worker'} expired (claim {token})"
    to_state, category, fields = State.PENDING, "", {}
    if action is not None and open_attempt is not None and reached_destination:
        to_state, category = State.UNKNOWN, "ambiguous"
        # Reconciliation asks the destination once the abandoned request can no longer land.
        fields["next_attempt_at"] = max(now, open_attempt.started_at + action.settle_after)
        if action.performed_by_caller:
            why = f"{CALLER_SILENT} ({operation.lease_owner or 'the caller'}); it may have acted"
            fields.update(last_error_category=category, last_error_message=why)
    elif external:
        fields["attempts"] = max(operation.attempts - 1, 0)
    elif action is not None and operation.attempts >= action.max_attempts:
        # Its own failure group in the queue: every operation whose worker died this way.
        why = f"attempt limit reached ({operation.attempts} of {action.max_attempts}): {WORKER_STOPPED}"
        to_state, category = State.NEEDS_REVIEW, "transient"
        fields.update(next_attempt_at=None, last_error_category=category, last_error_message=why)
        message = f"{message}: {why}"
    with transaction.atomic():
        # Lock order (docs/architecture.md): the rows (the attempt, then the operation), then the
        # tallies (the abandoned try counted with the move), then the chain; undone below if the
        # transition finds the claim gone.
        if open_attempt is not None:
            finish_attempt(open_attempt, Attempt.Outcome.ABANDONED, counted=False)
        if not _still_expired(operation, token, now):
            # A heartbeat renewed it after we read it (a caller's, which holds the row to do so).
            transaction.set_rollback(True)
            return False
        done = transition_operation(
            operation,
            to_state=to_state,
            actor=actor,
            kind=LEASE_EXPIRED,
            fencing_token=token,
            error_category=category,
            message=message,
            attempt_outcome=Attempt.Outcome.ABANDONED if open_attempt is not None else None,
            lease_owner="",
            lease_expires_at=None,
            **fields,
        )
        if not done:
            transaction.set_rollback(True)
        elif reached_destination:
            transaction.on_commit(partial(nudges.enqueue_lookup, operation.pk, at=fields["next_attempt_at"]))
    return done


def _still_expired(operation: Operation, token: int, now: datetime) -> bool:
    """Whether the claim ``token`` still holds the row with its lease expired, the row locked until
    the caller's transaction ends (after the attempt's: the lock order of a report)."""
    held = Operation.objects.select_for_update(no_key=True).filter(
        pk=operation.pk, state=State.PROCESSING, fencing_token=token, lease_expires_at__lt=now
    )
    return held.exists()


def send_late_to_review(operation: Operation, *, actor: str = "sweep") -> bool:
    """Due work whose processing deadline passed before it ran goes to review (the sweep finds it;
    a caller's claim meets it at once). False when the operation moved meanwhile."""
    return transition_operation(
        operation,
        to_state=State.NEEDS_REVIEW,
        actor=actor,
        kind="deadline_passed",
        error_category="deadline",
        message="processing deadline passed before the operation ran",
        last_error_category="deadline",
        last_error_message="processing deadline passed",
        next_attempt_at=None,
    )


def _action_or_none(action_name: str):
    try:
        return get_action(action_name)
    except UnknownAction:
        return None
