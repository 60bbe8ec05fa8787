"""The one verb that moves an operation's state: a guarded UPDATE checked against the state table
(``ledger.states``), with its tally, its audit event and its log line. Every state change in Python
goes through here; the few made in SQL take only edges generated from the same table."""

import logging

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from ledger.core import audit_chain, configuration, tallies
from ledger.models import AuditEvent, Operation, Workspace
from ledger.states import TERMINAL_STATES, State, can_transition

logger = logging.getLogger("ledger")


class IllegalTransition(Exception):
    pass


def record_audit_event(*, actor: str, kind: str, operation: Operation | None = None,
                       workspace: Workspace | None = None, from_state: str = "", to_state: str = "",
                       error_category: str = "", message: str = "", attempt=None) -> AuditEvent:
    """Append one audit event to its workspace's chain. Callers run it in the transaction of the
    change it describes."""
    [event] = audit_chain.append([AuditEvent(
        operation=operation,
        workspace_id=workspace.pk if workspace else (operation.workspace_id if operation else None),
        actor=actor,
        kind=kind,
        from_state=from_state,
        to_state=to_state,
        error_category=error_category,
        message=message[:500],
        attempt=attempt,
    )])
    return event


def transition_operation(operation: Operation, *, to_state: State, actor: str, kind: str,
                         fencing_token: int | None = None, also_requires: dict | None = None,
                         message: str = "", error_category: str = "", attempt=None, **fields) -> bool:
    """Move ``operation`` from its current state (as loaded) to ``to_state``, with an audit event.

    A guarded UPDATE (``WHERE id = .. AND state = <loaded state>`` and, when given, ``AND
    fencing_token = ..`` and the ``also_requires`` columns) makes the move a compare-and-set: it
    returns False and changes nothing when another process moved the row first. The row and its
    audit event commit together: in the caller's transaction when there is one, else in a
    transaction of their own.
    """
    from_state = operation.state
    if not can_transition(from_state, to_state):
        raise IllegalTransition(f"{from_state} -> {to_state} is not a transition of the state machine.")
    guard = Q(pk=operation.pk, state=from_state)
    if fencing_token is not None:
        guard &= Q(fencing_token=fencing_token)
    if also_requires:
        guard &= Q(**also_requires)
    now = timezone.now()
    # No savepoint: inside a caller's transaction a failure here fails the whole transaction
    # anyway, and a savepoint would cost two round trips per transition.
    # Lock order (docs/architecture.md): the row, then the tallies, then the audit chain. A caller
    # that moves several operations in one transaction uses transition_operations instead.
    with transaction.atomic(savepoint=False):
        changed = Operation.objects.filter(guard).update(state=to_state, updated_at=now, **fields)
        if not changed:
            return False
        if to_state in TERMINAL_STATES:
            tallies.count_finished([operation], now)
        record_audit_event(
            actor=actor, kind=kind, operation=operation, from_state=from_state, to_state=to_state,
            error_category=error_category, message=message, attempt=attempt,
        )
    for name, value in fields.items():
        if not isinstance(value, F):
            setattr(operation, name, value)
    operation.state = to_state
    operation.updated_at = now
    log_transition(operation, from_state=from_state, to_state=to_state, kind=kind, error_category=error_category,
                   attempt=attempt)
    return True


def transition_operations(operations: list[Operation], *, to_state: State, actor: str, kind: str,
                          message: str = "", **fields) -> list[Operation]:
    """Move each of ``operations`` from its state (as loaded) to ``to_state`` in one transaction
    (the caller's, if any), each by the guarded UPDATE of ``transition_operation``; returns those
    that moved. In the lock order (docs/architecture.md): every row first (callers lock them
    beforehand, in id order, when others may hold them), then the tallies, then one append of all
    their audit events, the workspace's chain last. One ``transition_operation`` after another
    would take a row after the chain."""
    for operation in operations:
        if not can_transition(operation.state, to_state):
            raise IllegalTransition(f"{operation.state} -> {to_state} is not a transition of the state machine.")
    now = timezone.now()
    moved = []
    with transaction.atomic(savepoint=False):
        for operation in operations:
            if Operation.objects.filter(pk=operation.pk, state=operation.state).update(
                    state=to_state, updated_at=now, **fields):
                moved.append((operation, operation.state))
        if to_state in TERMINAL_STATES:
            tallies.count_finished([operation for operation, _ in moved], now)
        audit_chain.append([AuditEvent(operation=operation, workspace_id=operation.workspace_id, actor=actor, kind=kind,
                                 from_state=from_state, to_state=to_state, message=message[:500])
                      for operation, from_state in moved])
    for operation, from_state in moved:
        for name, value in fields.items():
            if not isinstance(value, F):
                setattr(operation, name, value)
        operation.state, operation.updated_at = to_state, now
        log_transition(operation, from_state=from_state, to_state=to_state, kind=kind)
    return [operation for operation, _ in moved]


def log_transition(operation: Operation, *, from_state: str, to_state: str, kind: str, error_category: str = "",
                   attempt=None, config_version: str | None = None) -> None:
    """The log line of a state change: identifiers and states, never payload text. The
    configuration is the one the attempt ran under (``config_version``, or the attempt's), or else
    the one the operation would run under now (``ledger.core.configuration``), by its digest's first 12
    characters."""
    config = config_version or (attempt.config_version_id if attempt is not None else None) or \
        configuration.current_digest(operation)
    logger.info("transition", extra={
        "key": operation.key, "from": str(from_state), "to": str(to_state), "kind": kind,
        "error_category": error_category, "attempts": operation.attempts,
        "correlation_id": operation.correlation_id, "config_version": (config or "")[:12]})

