"""The one verb that moves operations' states: ``transition_many``, a guarded UPDATE for a set of rows
checked against the state table (``ledger.states``), with their tallies, their audit events, the
notifications they announce (``ledger.core.announcements``) and a log line each;
``transition_operation`` is its one-row case. Every state change in Python goes through here; the
one made in SQL (``ledger_finish_claimed``) takes only edges generated from the same table
(``ledger.states.sql_edges``)."""

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TypeVar

from django.db import transaction
from django.utils import timezone

from ledger.core import announcements, audit_chain, configuration, tallies
from ledger.core.bulk_sql import update_each_returning_pks
from ledger.models import AuditEvent, Operation, Workspace
from ledger.states import TERMINAL_STATES, State, can_transition

logger = logging.getLogger("ledger")

# The kind of the move that takes an operation from a claim whose lease expired
# (ledger.engine.expiry): counted as it is written (/metrics' opsconsole_leases_expired_total).
LEASE_EXPIRED = "lease_expired"


class IllegalTransition(Exception):
    pass


def save_audited(row, *, actor: str, noun: str, message: str, workspace: Workspace | None = None) -> None:
    """Save a configuration ``row`` (a destination, an HTTP action, a source) and audit it as
    ``<noun>_created`` or ``<noun>_changed``, in one transaction."""
    created = row.pk is None
    with transaction.atomic():
        row.save()
        kind = f"{noun}_created" if created else f"{noun}_changed"
        record_audit_event(actor=actor, kind=kind, workspace=workspace, message=message)


def audit_event(
    *,
    actor: str,
    kind: str,
    operation: Operation | None = None,
    workspace: Workspace | None = None,
    from_state: str = "",
    to_state: str = "",
    error_category: str = "",
    message: str = "",
    times: dict | None = None,
    attempt=None,
) -> AuditEvent:
    """An audit event, not appended yet (``record_audit_event``, ``record_audit_events``).
    ``times``: those ``message`` names as ``{name}`` (``ledger.timed.kept``)."""
    return AuditEvent(
        operation=operation,
        workspace_id=workspace.pk if workspace else (operation.workspace_id if operation else None),
        actor=actor,
        kind=kind,
        from_state=from_state,
        to_state=to_state,
        error_category=error_category,
        message=message[:500],
        times=times or None,
        attempt=attempt,
    )


def record_audit_event(**fields) -> AuditEvent:
    """Append one audit event (``fields`` as ``audit_event`` takes them) to its workspace's chain.
    Callers run it in the transaction of the change it describes."""
    [event] = record_audit_events([audit_event(**fields)])
    return event


def record_audit_events(events: list[AuditEvent]) -> list[AuditEvent]:
    """Append audit events of several operations (``audit_event``) at once: their chains, a
    workspace's lanes too, are locked together in one order, where appending them one by one would
    take the lanes in the events' order, and two such transactions could deadlock."""
    return audit_chain.append(events)


def transition_operation(
    operation: Operation,
    *,
    to_state: State,
    actor: str,
    kind: str,
    fencing_token: int | None = None,
    also_requires: dict | None = None,
    message: str = "",
    times: dict | None = None,
    error_category: str = "",
    attempt=None,
    attempt_outcome: str | None = None,
    **fields,
) -> bool:
    """Move ``operation`` from its current state (as loaded) to ``to_state``, with an audit event:
    ``transition_many`` of one row, its ``fields`` the values it writes. True when it moved; False,
    and nothing changed, when another process moved the row first (or took the claim whose
    ``fencing_token`` is given, or changed an ``also_requires`` column). ``attempt_outcome``: a
    try's outcome, counted with the move (after the row, as the lock order asks)."""
    return bool(
        transition_many(
            [operation],
            to_state=to_state,
            actor=actor,
            kind=kind,
            same=fields,
            tokens=None if fencing_token is None else [fencing_token],
            also_requires=also_requires,
            message=message,
            times=times,
            error_category=error_category,
            attempt_rows=[attempt],
            attempt_outcome=attempt_outcome,
        )
    )


# An Operation, or one read with annotations (``ledger.core.held_time``): what moved is returned as given.
OperationT = TypeVar("OperationT", bound=Operation)


def transition_many(
    operations: Sequence[OperationT],
    *,
    to_state: State,
    actor: str,
    kind: str,
    same: dict | None = None,
    each: dict[str, list] | None = None,
    increment: tuple[str, ...] = (),
    tokens: list[int] | None = None,
    also_requires: dict | None = None,
    message: str | list[str] = "",
    times: dict | None = None,
    error_category: str = "",
    attempt_rows: list | None = None,
    attempt_outcome: str | None = None,
    raise_if_any_stays: type[Exception] | None = None,
    now: datetime | None = None,
) -> list[OperationT]:
    """Move each of ``operations`` from its state (as loaded) to ``to_state``: one guarded UPDATE
    for the set, its tallies, one append of its audit events, a log line per row. Returns the
    operations that moved, in the given order, updated in memory.

    Every (from, to) edge is checked against the state table first: one that is not in it raises
    IllegalTransition and nothing is written. Each row is guarded by its id, its state as loaded
    and, with ``tokens`` (one per operation: the claims the caller holds), its fencing token, and
    the ``also_requires`` columns: a row another process changed first stays as it is, and is
    neither tallied, audited nor logged; what that means is the caller's to say (a stale claim, a
    person's decision overtaken). With ``raise_if_any_stays`` nothing but the UPDATE is written
    when a row stayed, and that exception is raised, which rolls back the caller's transaction
    (or this one) with it. Each row gets the ``same`` values, its own of the ``each`` lists (one
    value per operation, in order) and its ``increment`` columns plus one. ``message`` is the
    audit events' text, one for all or one per operation, and ``times`` the times it names as
    ``{name}`` (``ledger.timed``); ``attempt_rows`` the Attempt each move
    records (its event names it, its log line the configuration it ran under), and
    ``attempt_outcome`` that try's outcome, counted with the move's tallies (None: the caller
    counted it).

    The rows and their events commit together: in the caller's transaction when there is one,
    else in one of their own. Lock order (docs/architecture.md "One lock order"): the rows (in id
    order: the VALUES list is sorted by id; a caller whose rows others may hold locks them
    beforehand, in id order), then the tallies, then the audit chain, last.
    """
    if not operations:
        return []
    from_states = [operation.state for operation in operations]
    refuse_illegal(from_states, to_state)
    count, now, same, each = len(operations), now or timezone.now(), same or {}, each or {}
    messages = message if isinstance(message, list) else [message] * count
    attempt_rows = attempt_rows if attempt_rows is not None else [None] * count
    _refuse_unmatched_lists(count, messages=messages, attempt_rows=attempt_rows, tokens=tokens, **each)
    # No savepoint: inside a caller's transaction a failure here fails the whole transaction
    # anyway (Django marks it for rollback), and a savepoint costs two round trips.
    with transaction.atomic(savepoint=False):
        moved = _update_guarded(
            operations,
            from_states,
            tokens,
            also_requires,
            same={"state": to_state, "updated_at": now, "state_changed_at": now, **same},
            each=each,
            increment=increment,
        )
        if raise_if_any_stays is not None and len(moved) < count:
            raise raise_if_any_stays(f"{count - len(moved)} of {count} operations changed under their guard")
        _count(operations, moved, to_state, attempt_outcome, now, kind)
        events = audit_chain.append(
            [
                AuditEvent(
                    operation=operations[index],
                    workspace_id=operations[index].workspace_id,
                    actor=actor,
                    kind=kind,
                    from_state=from_states[index],
                    to_state=to_state,
                    error_category=error_category,
                    message=messages[index][:500],
                    times=times or None,
                    attempt=attempt_rows[index],
                )
                for index in moved
            ]
        )
        for index in moved:
            own = {name: values[index] for name, values in each.items()}
            _apply(operations[index], to_state, now, same, own, increment)
        # The notifications of the moves, after their events (only new rows after the chain).
        if to_state in announcements.ANNOUNCING_STATES:
            announcements.announce(announcements.of_moves([operations[index] for index in moved], events), now=now)
    digests: dict[tuple[int, str], str] = {}
    for index in moved:
        operation = operations[index]
        log_transition(
            operation,
            from_state=from_states[index],
            to_state=to_state,
            kind=kind,
            error_category=error_category,
            attempt=attempt_rows[index],
            config_version=_config_of(operation, attempt_rows[index], digests),
        )
    return [operations[index] for index in moved]


def _update_guarded(operations, from_states, tokens, also_requires, *, same, each, increment) -> list[int]:
    """The one UPDATE of a move, each row guarded by its id, its state as loaded, and its token when
    ``tokens`` are given; the rows listed in id order. Returns the positions of the rows that moved."""
    by_id = sorted(range(len(operations)), key=lambda index: operations[index].pk)
    match = {"state": [from_states[index] for index in by_id]}
    if tokens is not None:
        match["fencing_token"] = [tokens[index] for index in by_id]
    moved_ids = update_each_returning_pks(
        Operation,
        [operations[index].pk for index in by_id],
        match=match,
        same=same,
        each={name: [values[index] for index in by_id] for name, values in each.items()},
        where=also_requires or {},
        increment=increment,
    )
    return [index for index, operation in enumerate(operations) if operation.pk in moved_ids]


def refuse_illegal(from_states: list[str], to_state: str) -> None:
    """IllegalTransition unless every (from, ``to_state``) is an edge of the state table."""
    for from_state in sorted(set(from_states)):
        if not can_transition(from_state, to_state):
            raise IllegalTransition(f"{from_state} -> {to_state} is not a transition of the state machine.")


def _refuse_unmatched_lists(count: int, **lists) -> None:
    """ValueError unless every per-operation list has one value per operation."""
    for name, values in lists.items():
        if values is not None and len(values) != count:
            raise ValueError(f"{len(values)} {name} for {count} operations")


def _count(operations, moved: list[int], to_state: State, attempt_outcome: str | None, now, kind: str) -> None:
    finished = [operations[index] for index in moved] if to_state in TERMINAL_STATES else []
    tried = [(operations[index], attempt_outcome) for index in moved] if attempt_outcome else []
    expired = [operations[index] for index in moved] if kind == LEASE_EXPIRED else []
    if finished or tried or expired:
        tallies.count_moves(finished, now, attempts=tried, expired=expired)


def _apply(operation: Operation, to_state: State, now, same: dict, own: dict, increment) -> None:
    """Make ``operation`` in memory what its move wrote."""
    for name, value in (same | own).items():
        setattr(operation, name, value)
    for name in increment:
        setattr(operation, name, getattr(operation, name) + 1)
    operation.state, operation.updated_at, operation.state_changed_at = to_state, now, now


def _config_of(operation: Operation, attempt, digests: dict) -> str:
    """The configuration a move's log line names: its attempt's, or the one the operation would
    run under now, computed once per workspace and action of the set."""
    if attempt is not None and attempt.config_version_id:
        return attempt.config_version_id
    scope = (operation.workspace_id, operation.action)
    if scope not in digests:
        digests[scope] = configuration.current_digest(operation)
    return digests[scope]


def moved_in_sql(
    operations: list[Operation],
    *,
    to_state: State,
    kind: str,
    configs: list[str | None],
    now,
    same: dict,
    each: dict[str, list],
) -> None:
    """Make ``operations`` in memory what SQL that moves states itself wrote (``ledger_finish_claimed``,
    whose edges come from the state table: ``ledger.states.sql_edges``; ``same`` and ``each`` as
    ``transition_many`` takes them), each from its state as loaded, and log each move as it does
    (``configs``: the configuration each ran under)."""
    from_states = [operation.state for operation in operations]
    refuse_illegal(from_states, to_state)
    for index, (operation, config) in enumerate(zip(operations, configs, strict=True)):
        _apply(operation, to_state, now, same, {name: values[index] for name, values in each.items()}, ())
        log_transition(operation, from_state=from_states[index], to_state=to_state, kind=kind, config_version=config)


def log_transition(
    operation: Operation,
    *,
    from_state: str,
    to_state: str,
    kind: str,
    error_category: str = "",
    attempt=None,
    config_version: str | None = None,
) -> None:
    """The log line of a state change: identifiers and states, never payload text. The
    configuration is the one the attempt ran under (``config_version``, or the attempt's), or else
    the one the operation would run under now (``ledger.core.configuration``), by its digest's first 12
    characters."""
    config = (
        config_version
        or (attempt.config_version_id if attempt is not None else None)
        or configuration.current_digest(operation)
    )
    logger.info(
        "transition",
        extra={
            "key": operation.key,
            "from": str(from_state),
            "to": str(to_state),
            "kind": kind,
            "error_category": error_category,
            "attempts": operation.attempts,
            "correlation_id": operation.correlation_id,
            "config_version": (config or "")[:12],
        },
    )
