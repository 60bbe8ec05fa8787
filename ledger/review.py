"""What a person does with an operation: replay it under its own key, or cancel it; and with a
conflict: dismiss it, or apply its payload while the operation has not run.

Console views, admin actions and commands call these; like every write they go through
``transition_operation``, so each is a guarded state change with its audit event.
"""

from functools import partial

from django.db import transaction
from django.utils import timezone

from ledger import tasks
from ledger.actions import UnknownAction, get_action
from ledger.models import Conflict, Delivery, Operation
from ledger.services import record_audit_event, transition_operation
from ledger.states import TRANSITIONS, State


class ReviewError(Exception):
    """The action is not possible for this operation now; the message says why."""


def replay_operation(operation: Operation, *, actor: str, reason: str) -> Operation:
    """Run an operation that needs review again, under the same key (so the same idempotency key
    reaches the destination): ``needs_review`` -> ``pending`` (``pending_approval`` when the action
    is consequential), with a fresh attempt budget and deadline.

    The replay is recorded as a delivery (source ``replay``) and audited with the actor and reason;
    when the action's definition changed since the operation was reserved, the audit message says
    so and the operation takes the new version. Workers are nudged on commit.
    """
    if operation.state != State.NEEDS_REVIEW:
        raise ReviewError(f"Only an operation that needs review can be replayed; {operation.key} is {operation.state}.")
    action = _action_of(operation)
    message = f"replay: {reason}" if reason else "replay"
    if operation.definition_version != action.version:
        message += f" (definition changed {operation.definition_version} -> {action.version})"
    message += f" after {operation.attempts} attempt(s)"
    with transaction.atomic():
        replayed = transition_operation(
            operation, to_state=State.PENDING_APPROVAL if action.consequential else State.PENDING,
            actor=actor, kind="replayed", message=message,
            attempts=0, next_attempt_at=None, deadline=timezone.now() + action.deadline,
            definition_version=action.version, last_error_category="", last_error_message="",
        )
        if not replayed:
            raise ReviewError(f"{operation.key} changed meanwhile; reload it and decide again.")
        Delivery.objects.create(
            workspace_id=operation.workspace_id, operation=operation, source=Delivery.Source.REPLAY,
            submitted_by=actor, action=operation.action, key=operation.key,
            correlation_id=operation.correlation_id, outcome=Delivery.Outcome.ACCEPTED,
        )
        transaction.on_commit(partial(tasks.enqueue_processing, operation.pk))
    return operation


def cancel_operation(operation: Operation, *, actor: str, reason: str) -> Operation:
    """Give up on an operation that has not run to an end (pending, retrying or needing review)."""
    if State.CANCELLED not in TRANSITIONS[State(operation.state)]:
        allowed = ", ".join(sorted(s for s, targets in TRANSITIONS.items() if State.CANCELLED in targets))
        raise ReviewError(f"{operation.key} is {operation.state}; only {allowed} operations can be cancelled.")
    cancelled = transition_operation(
        operation, to_state=State.CANCELLED, actor=actor, kind="cancelled",
        message=f"cancel: {reason}" if reason else "cancel", next_attempt_at=None,
    )
    if not cancelled:
        raise ReviewError(f"{operation.key} changed meanwhile; reload it and decide again.")
    return operation


def dismiss_conflict(conflict: Conflict, *, actor: str, reason: str) -> Conflict:
    """Keep the recorded payload: the incoming one was a mistake (or is stale) and stays unapplied."""
    with transaction.atomic():
        _decide(conflict, Conflict.Status.DISMISSED, actor=actor)
        record_audit_event(actor=actor, kind="conflict_dismissed", operation=conflict.operation,
                           message=_conflict_message(conflict, reason))
    return conflict


def apply_conflict(conflict: Conflict, *, actor: str, reason: str) -> Conflict:
    """Replace the operation's payload with the conflict's, allowed only while the operation has
    not run (pending or awaiting approval, no attempt yet; for a consequential action only while
    awaiting approval): what already happened, or was approved, is never rewritten.

    Locks: the operation row, by a guarded UPDATE that also requires the payload the conflict was
    measured against, so a worker's claim or another decision in between makes this refuse.
    """
    operation = conflict.operation
    # A consequential operation's approval covers the payload it was given for: once approved,
    # the payload stays as approved (the conflict can be dismissed, or a new version submitted).
    not_run = [State.PENDING_APPROVAL] if _action_of(operation).consequential else [State.PENDING,
                                                                                     State.PENDING_APPROVAL]
    with transaction.atomic():
        applied = Operation.objects.filter(
            pk=operation.pk, state__in=not_run, attempts=0, fingerprint=operation.fingerprint,
        ).update(payload=conflict.incoming_payload, fingerprint=conflict.incoming_fingerprint,
                 updated_at=timezone.now())
        if not applied:
            raise ReviewError(
                f"{operation.key} has already run or changed ({operation.state}, {operation.attempts} attempt(s)); "
                "a conflict can only be applied before the operation runs. Dismiss it, or submit a new version."
            )
        _decide(conflict, Conflict.Status.APPLIED, actor=actor)
        record_audit_event(actor=actor, kind="conflict_applied", operation=operation,
                           message=_conflict_message(conflict, reason))
    operation.payload, operation.fingerprint = conflict.incoming_payload, conflict.incoming_fingerprint
    return conflict


def _decide(conflict: Conflict, status: str, *, actor: str) -> None:
    now = timezone.now()
    decided = Conflict.objects.filter(pk=conflict.pk, status=Conflict.Status.OPEN).update(
        status=status, decided_by=actor, decided_at=now
    )
    if not decided:
        conflict.refresh_from_db(fields=["status"])
        raise ReviewError(f"Conflict {conflict.pk} is already {conflict.status}.")
    conflict.status, conflict.decided_by, conflict.decided_at = status, actor, now


def _conflict_message(conflict: Conflict, reason: str) -> str:
    fields = ", ".join(d["field"] for d in conflict.differences)
    return f"conflict {conflict.pk} ({fields}): {reason}" if reason else f"conflict {conflict.pk} ({fields})"


def _action_of(operation: Operation):
    try:
        return get_action(operation.action)
    except UnknownAction:
        raise ReviewError(f"Action {operation.action!r} is not registered; {operation.key} cannot run.") from None
