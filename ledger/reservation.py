"""Reserving the operations of validated events, set-based: a batch of 500 costs a handful of
statements and one commit, and a single event the same few.

For the events of one request, in the caller's transaction:
1. one ``INSERT .. ON CONFLICT DO NOTHING RETURNING`` for the operations of the keys not seen
   before in the request: the database decides who reserves each key, and the rows it returns
   are the ones this request created (DESIGN.md rule 2);
2. one ``SELECT`` for the keys that were already taken (duplicates and conflicts);
3. one multi-row insert each for the deliveries (with their final outcome: nothing is updated
   afterwards, so no dead row is left), the conflicts and the people behind new operations;
4. one append of all audit events to the workspace's chain;
5. a wake-up of the cluster, coalesced (``ledger.nudges.request_processing``).
"""

from dataclasses import dataclass

from django.db import connection
from django.db.models import sql
from django.db.models.constants import OnConflict
from django.utils import timezone

from ledger import audit, nudges
from ledger.actions import ActionDefinition
from ledger.keys import KEY_RECIPE, canonical_json
from ledger.models import AuditEvent, Conflict, Contribution, Delivery, Operation, Workspace
from ledger.states import State

Outcome = Delivery.Outcome


@dataclass
class Event:
    """A validated event, ready to reserve."""

    action: ActionDefinition
    data: dict
    key: str
    fingerprint: str
    delivery_id: str
    correlation_id: str
    occurred_at: object


@dataclass
class Reserved:
    outcome: str
    operation: Operation
    conflict: Conflict | None = None


def reserve(workspace: Workspace, events: list[Event], *, source: str, submitted_by: str,
            person) -> list[Reserved]:
    """Reserve the operations of ``events`` (in the caller's transaction); one Reserved per event."""
    operations, created = _operations(workspace, events, submitted_by=submitted_by)
    first_of_key: dict[str, int] = {}
    outcomes = []
    for index, event in enumerate(events):
        operation = operations[event.key]
        first = first_of_key.setdefault(event.key, index) == index
        if first and event.key in created:
            outcomes.append(Outcome.ACCEPTED)
        elif operation.fingerprint == event.fingerprint:
            outcomes.append(Outcome.DUPLICATE)
        else:
            outcomes.append(Outcome.CONFLICT)
    deliveries = Delivery.objects.bulk_create([
        Delivery(workspace=workspace, source=source, submitted_by=submitted_by, person=person,
                 action=event.action.name, key=event.key, delivery_id=event.delivery_id,
                 correlation_id=event.correlation_id, occurred_at=event.occurred_at,
                 operation=operations[event.key], outcome=outcome)
        for event, outcome in zip(events, outcomes, strict=True)
    ])
    conflicts = _conflicts(events, outcomes, deliveries, operations)
    accepted = [operations[event.key] for event, outcome in zip(events, outcomes, strict=True)
                if outcome == Outcome.ACCEPTED]
    if person is not None and accepted:
        Contribution.objects.bulk_create([Contribution(operation=operation, user=person,
                                                       kind=Contribution.Kind.SUBMITTED) for operation in accepted])
    audit.append([
        _audit_event(outcome, operations[event.key], delivery, conflicts.get(index), actor=submitted_by or source,
                     source=source)
        for index, (event, outcome, delivery) in enumerate(zip(events, outcomes, deliveries, strict=True))
    ])
    if accepted:
        # A large batch gets a task per claim batch at once, so every worker helps drain it.
        extra = nudges.nudges_for(len(accepted)) - 1
        nudges.request_processing(extra=max(extra, 0))
    return [Reserved(outcome, operations[event.key], conflicts.get(index))
            for index, (event, outcome) in enumerate(zip(events, outcomes, strict=True))]


def _operations(workspace, events, *, submitted_by) -> tuple[dict[str, Operation], set[str]]:
    """The operation of every key (created now, or found), and the keys created now."""
    now = timezone.now()
    candidates: dict[str, Operation] = {}
    for event in events:
        if event.key in candidates:
            continue
        action = event.action
        candidates[event.key] = Operation(
            workspace=workspace, action=action.name, key=event.key, key_recipe=KEY_RECIPE,
            definition_version=action.version, fingerprint=event.fingerprint, payload=event.data,
            correlation_id=event.correlation_id, submitted_by=submitted_by, deadline=action.first_deadline(now),
            state=State.PENDING_APPROVAL if action.consequential else State.PENDING,
        )
    if connection.vendor == "postgresql":
        operations = _insert_or_read(workspace, candidates)
    else:
        operations = _read_then_insert(workspace, candidates)
    created = {key for key, operation in operations.items() if operation.created}
    for key in candidates:
        if key not in operations:  # reserved by a transaction that committed during our statement
            operations[key] = Operation.objects.get(workspace=workspace, key=key)
            operations[key].created = False
    for operation in operations.values():
        operation.workspace = workspace
    return operations, created


_FIELDS = [f for f in Operation._meta.concrete_fields if not f.primary_key]


def _insert_query(candidates: dict[str, Operation], returning) -> tuple[str, list]:
    """Django's own INSERT (pre_save, value preparation per database) with ON CONFLICT DO NOTHING
    and a RETURNING clause, which bulk_create will not combine."""
    query = sql.InsertQuery(Operation, on_conflict=OnConflict.IGNORE)
    query.insert_values(_FIELDS, list(candidates.values()))
    compiler = query.get_compiler(using=Operation.objects.db)
    compiler.returning_fields = returning
    [(insert_sql, params)] = compiler.as_sql()
    return insert_sql, list(params)


def _insert_or_read(workspace, candidates: dict[str, Operation]) -> dict[str, Operation]:
    """PostgreSQL, one statement: insert the new keys and read the taken ones. The rows the INSERT
    returns are the ones this request created; the others are read in the same statement."""
    columns = [Operation._meta.pk, *_FIELDS]
    insert_sql, params = _insert_query(candidates, columns)
    names = ", ".join(connection.ops.quote_name(field.column) for field in columns)
    table = connection.ops.quote_name(Operation._meta.db_table)
    rows = Operation.objects.raw(
        f"WITH inserted AS ({insert_sql}) "
        f"SELECT {names}, TRUE AS created FROM inserted "
        f"UNION ALL SELECT {names}, FALSE AS created FROM {table} "
        f"WHERE workspace_id = %s AND key = ANY(%s) AND key NOT IN (SELECT key FROM inserted)",
        [*params, workspace.pk, list(candidates)],
    )
    return {operation.key: operation for operation in rows}


def _read_then_insert(workspace, candidates: dict[str, Operation]) -> dict[str, Operation]:
    """Elsewhere (SQLite, whose one writer holds the database for the whole transaction, so
    nothing can come between): read the taken keys, then insert the others returning their ids."""
    operations = {}
    for operation in Operation.objects.filter(workspace=workspace, key__in=list(candidates)):
        operation.created = False
        operations[operation.key] = operation
    new = [operation for key, operation in candidates.items() if key not in operations]
    if not new:
        return operations
    returning = [Operation._meta.pk, Operation._meta.get_field("key")]
    inserted = Operation.objects._insert(new, fields=_FIELDS, returning_fields=returning,
                                         on_conflict=OnConflict.IGNORE)
    # One row per inserted operation (a single-row insert answers None when it was ignored).
    for pk, key in filter(None, inserted):
        operation = candidates[key]
        operation.pk, operation.created = pk, True
        operation._state.adding, operation._state.db = False, Operation.objects.db
        operations[key] = operation
    return operations


def _conflicts(events, outcomes, deliveries, operations) -> dict[int, Conflict]:
    pending = {
        index: Conflict(operation=operations[event.key], delivery=delivery, incoming_fingerprint=event.fingerprint,
                        incoming_payload=event.data,
                        differences=_differences(operations[event.key].payload, event.data, event.action))
        for index, (event, outcome, delivery) in enumerate(zip(events, outcomes, deliveries, strict=True))
        if outcome == Outcome.CONFLICT
    }
    Conflict.objects.bulk_create(list(pending.values()))
    return pending


def _differences(recorded: dict, incoming: dict, action: ActionDefinition) -> list[dict]:
    return [
        {"field": name, "recorded": recorded.get(name), "incoming": incoming.get(name)}
        for name in action.fingerprint_fields
        if canonical_json(recorded.get(name)) != canonical_json(incoming.get(name))
    ]


def _audit_event(outcome, operation, delivery, conflict, *, actor, source) -> AuditEvent:
    event = AuditEvent(operation=operation, workspace_id=operation.workspace_id, actor=actor)
    if outcome == Outcome.ACCEPTED:
        event.kind, event.to_state = "reserved", operation.state
        event.message = f"delivery {delivery.pk} via {source}"
    elif outcome == Outcome.DUPLICATE:
        event.kind, event.message = "duplicate_delivery", f"delivery {delivery.pk} via {source}"
    else:
        fields = ", ".join(d["field"] for d in conflict.differences)
        event.kind, event.message = "conflict_detected", f"conflict {conflict.pk}: {fields} differ"
    return event
