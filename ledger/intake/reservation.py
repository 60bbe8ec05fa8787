"""Reserving the operations of validated events, set-based: a batch of 500 costs what a single
event costs, a handful of statements and one commit, or on PostgreSQL one statement.

For the events of one request (and the deliveries refused before them), in the caller's
transaction:
1. the database decides who reserves each key: ``INSERT .. ON CONFLICT DO NOTHING``, the rows it
   returns being the ones this request created (docs/design.md rule 2); a key repeated within the
   request is reserved by its first event, the later ones are its duplicates or conflicts;
2. one multi-row insert each for the deliveries (with their final outcome: nothing is updated
   afterwards, so no dead row is left), the conflicts (with their differences) and the people
   behind new operations;
3. one append of all audit events to the workspace's chain, after every row is written (the lock
   order, docs/architecture.md: rows, then the chain; a new row locks nothing another waits for);
4. a wake-up of the cluster, coalesced (``ledger.core.nudges.request_processing``): its row's KEY SHARE
   lock is the only lock taken after the chain, and the only other taker of that row, a processing
   task's DELETE (``nudges.begin_processing``), runs alone and holds no chain.

On PostgreSQL all of it is one call of ``ledger_reserve`` (``sql/reserve.sql``), or for a request of
one event ``ledger_reserve_one`` (``sql/reserve_one.sql``, the same in plain statements), given the
rows Python built from the models: in autocommit, as the API and the command line run intake, an
event costs one round trip and one commit, as a bare ``INSERT`` does. Elsewhere (SQLite) the same steps run
here, statement by statement. The two are held to one behaviour by the whole test suite, which CI
runs on both databases.
"""

import json
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime
from functools import cache, lru_cache

from django.db import connection, models, transaction
from django.db.models.constants import OnConflict
from django.utils import timezone

from ledger.actions import ActionDefinition
from ledger.core import audit_chain, nudges
from ledger.core.audit_chain import chain_lock_key
from ledger.core.rows import dumps, model_row
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
    # Set by ledger.intake.ordering.mark when the action's policy orders versions of one request.
    series: str = ""
    version: int | None = None
    ordered: str = ""

    def ordering_columns(self) -> dict:
        return {"series": self.series, "version": self.version, "ordered": self.ordered} if self.ordered else {}


def stale_delivery(workspace, event: Event, errors: list[dict], *, source: str, submitted_by: str,
                   person) -> Delivery:
    """The delivery (unsaved) of an event refused as stale: too old for its key window, or an
    older version after a newer one (latest_wins). It names the key; it reserves nothing."""
    return Delivery(workspace=workspace, source=source, submitted_by=submitted_by, person=person,
                    outcome=Outcome.STALE, errors=errors, action=event.action.name, key=event.key,
                    delivery_id=event.delivery_id, correlation_id=event.correlation_id,
                    occurred_at=event.occurred_at)


@dataclass
class Reserved:
    outcome: str
    operation: Operation
    conflict: Conflict | None = None


def reserve(workspace: Workspace, events: list[Event], *, refused: list[Delivery], source: str,
            submitted_by: str, person) -> list[Reserved]:
    """Record ``refused`` (invalid deliveries, unsaved) and reserve the operations of ``events``, in
    one transaction (the caller's, if any); one Reserved per event, in order."""
    if connection.vendor == "postgresql":
        return _reserve_in_database(workspace, events, refused=refused, source=source,
                                    submitted_by=submitted_by, person=person)
    with transaction.atomic():
        if refused:
            Delivery.objects.bulk_create(refused)
        return _reserve_here(workspace, events, source=source, submitted_by=submitted_by, person=person) \
            if events else []


# --- PostgreSQL: one call of ledger_reserve ------------------------------------------------------

def _reserve_in_database(workspace, events, *, refused, source, submitted_by, person) -> list[Reserved]:
    now = timezone.now()
    rows = _rows(workspace.pk, source, submitted_by, person.pk if person is not None else None)
    request = {
        "workspace_id": workspace.pk, "source": source, "now": now, "chain_lock": chain_lock_key(workspace.pk),
        "invalid": [model_row(refusal, received_at=now) for refusal in refused],
        "operation": {**rows["operation"], "created_at": now, "updated_at": now},
        "delivery": {**rows["delivery"], "received_at": now},
        "conflict": {**rows["conflict"], "created_at": now},
        "contribution": {**rows["contribution"], "created_at": now} if person is not None else None,
        "audit": audit_chain.keyed({**rows["audit"], "created_at": now}),
        "fingerprint_fields": {event.action.name: event.action.fingerprint_fields for event in events},
        "events": [{
            "operation": {"action": event.action.name, "key": event.key, "definition_version": event.action.version,
                          "fingerprint": event.fingerprint, "payload": event.data,
                          "correlation_id": event.correlation_id, "state": _first_state(event),
                          "deadline": event.action.first_deadline(now), **event.ordering_columns()},
            "delivery": {"delivery_id": event.delivery_id, "occurred_at": event.occurred_at},
        } for event in events],
    }
    # One event and no refusal, nearly every request, has a function of its own that writes it in
    # plain statements (migration 0024); a batch is reserved set-based.
    function = "ledger_reserve_one" if len(events) == 1 and not refused else "ledger_reserve"
    # One statement is its own transaction in autocommit; inside a caller's transaction, a
    # savepoint keeps a failed call from failing the caller's transaction with it.
    with transaction.atomic() if connection.in_atomic_block else nullcontext(), connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}(%s::jsonb)", [dumps(request)])
        answer = json.loads(cursor.fetchone()[0])  # Django's connections leave jsonb as text
    operations = {key: _instance(Operation, row, workspace=workspace) for key, row in answer["operations"].items()}
    reserved = []
    accepted = 0
    for found in answer["results"]:
        operation = operations[found["key"]]
        conflict = _instance(Conflict, found["conflict"], operation=operation) if found["conflict"] else None
        accepted += found["outcome"] == Outcome.ACCEPTED
        reserved.append(Reserved(found["outcome"], operation, conflict))
    if accepted:
        nudges.wake(accepted=accepted, took_wakeup=answer["wake"])
    return reserved


@lru_cache(maxsize=1024)
def _rows(workspace_id: int, source: str, submitted_by: str, person_id: int | None) -> dict[str, dict]:
    """The rows of the models, as Django would write them (every column), for one sender: each
    event then sets what it decides, and ledger_reserve fills in what only the database knows (ids,
    outcomes, a conflict's differences, the audit chain). Built once per sender and process."""
    return {
        "operation": model_row(Operation(workspace_id=workspace_id, key_recipe=KEY_RECIPE, submitted_by=submitted_by)),
        "delivery": model_row(Delivery(workspace_id=workspace_id, source=source, submitted_by=submitted_by,
                                  person_id=person_id)),
        "conflict": model_row(Conflict()),
        "contribution": model_row(Contribution(user_id=person_id, kind=Contribution.Kind.SUBMITTED)),
        "audit": model_row(AuditEvent(workspace_id=workspace_id, actor=submitted_by or source)),
    }


def _instance(model, row: dict, **related):
    """A model instance, as loaded from the database, from a row ledger_reserve returned (its
    values are JSON: only the times need converting)."""
    names, columns, times = _columns(model)
    values = [row[column] for column in columns]
    for index in times:
        if values[index] is not None:
            values[index] = datetime.fromisoformat(values[index])
    instance = model.from_db(Operation.objects.db, names, values)
    for name, value in related.items():
        setattr(instance, name, value)
    return instance


@cache
def _columns(model) -> tuple[list[str], list[str], list[int]]:
    fields = model._meta.concrete_fields
    times = [index for index, field in enumerate(fields) if isinstance(field, models.DateTimeField)]
    return [field.attname for field in fields], [field.column for field in fields], times


# --- elsewhere: statement by statement -----------------------------------------------------------

def _reserve_here(workspace, events, *, source, submitted_by, person) -> list[Reserved]:
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
        _delivery(workspace, event, source=source, submitted_by=submitted_by, person=person,
                  operation=operations[event.key], outcome=outcome)
        for event, outcome in zip(events, outcomes, strict=True)
    ])
    conflicts = _conflicts(events, outcomes, deliveries, operations)
    accepted = [operations[event.key] for event, outcome in zip(events, outcomes, strict=True)
                if outcome == Outcome.ACCEPTED]
    if person is not None and accepted:
        Contribution.objects.bulk_create([Contribution(operation=operation, user=person,
                                                       kind=Contribution.Kind.SUBMITTED) for operation in accepted])
    audit_chain.append([
        _audit_event(outcome, operations[event.key], delivery, conflicts.get(index), actor=submitted_by or source,
                     source=source)
        for index, (event, outcome, delivery) in enumerate(zip(events, outcomes, deliveries, strict=True))
    ])
    if accepted:
        nudges.request_processing(accepted=len(accepted))
    return [Reserved(outcome, operations[event.key], conflicts.get(index))
            for index, (event, outcome) in enumerate(zip(events, outcomes, strict=True))]


def _candidate(workspace, event: Event, *, submitted_by: str, now) -> Operation:
    """The operation ``event`` reserves if its key is new."""
    action = event.action
    return Operation(
        workspace=workspace, action=action.name, key=event.key, key_recipe=KEY_RECIPE,
        definition_version=action.version, fingerprint=event.fingerprint, payload=event.data,
        correlation_id=event.correlation_id, submitted_by=submitted_by, deadline=action.first_deadline(now),
        state=_first_state(event), created_at=now, updated_at=now, **event.ordering_columns(),
    )


def _first_state(event: Event) -> str:
    return State.PENDING_APPROVAL if event.action.consequential else State.PENDING


def _delivery(workspace, event: Event, *, source, submitted_by, person, **decided) -> Delivery:
    return Delivery(workspace=workspace, source=source, submitted_by=submitted_by, person=person,
                    action=event.action.name, key=event.key, delivery_id=event.delivery_id,
                    correlation_id=event.correlation_id, occurred_at=event.occurred_at, **decided)


def _operations(workspace, events, *, submitted_by) -> tuple[dict[str, Operation], set[str]]:
    """The operation of every key (created now, or found), and the keys created now."""
    now = timezone.now()
    candidates: dict[str, Operation] = {}
    for event in events:
        if event.key not in candidates:
            candidates[event.key] = _candidate(workspace, event, submitted_by=submitted_by, now=now)
    operations = _read_then_insert(workspace, candidates)
    created = {key for key, operation in operations.items() if operation.created}
    for operation in operations.values():
        operation.workspace = workspace
    return operations, created


_FIELDS = [f for f in Operation._meta.concrete_fields if not f.primary_key]


def _read_then_insert(workspace, candidates: dict[str, Operation]) -> dict[str, Operation]:
    """SQLite, whose one writer holds the database for the whole transaction (so nothing can come
    between): read the taken keys, then insert the others returning their ids."""
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
