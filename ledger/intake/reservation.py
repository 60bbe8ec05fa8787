"""Reserving the operations of validated events, set-based, in the database: a request of one
event or of 500 is one call of a PostgreSQL function, one round trip and (in autocommit, as the
API and the command line run intake) one commit, as a bare ``INSERT`` is.

For the events of one request (and the deliveries refused before them), in the caller's
transaction, ``ledger_reserve`` (``sql/reserve.sql``), or for a request of one event
``ledger_reserve_one`` (``sql/reserve_one.sql``, the same in plain statements), given the rows Python built from the
models:
0. (first, when the request names a ``token``: an API request let in by its process's token cache)
   checks that the token is still what the cache says (``ledger_token_unchanged``: live, same
   scopes, workspace, person and role), else raises SQLSTATE OC401 having written nothing;
1. lets the database decide who reserves each key: ``INSERT .. ON CONFLICT DO NOTHING``, the rows
   it returns being the ones this request created (docs/design.md rule 2); a key repeated within the
   request is reserved by its first event, the later ones are its duplicates or conflicts;
2. inserts the deliveries (with their final outcome: nothing is updated afterwards, so no dead row
   is left), the conflicts (with their differences) and the people behind new operations;
2b. holds for review each conflicting operation of an action whose ``on_conflict`` is ``hold`` that
   has not run yet (``HOLDABLE_STATES``, no attempt): ``needs_review``, error category
   ``conflict``, audited as ``conflict_held``. Its row is locked first (``FOR NO KEY UPDATE``, in id
   order), so a worker's claim of it either committed before (the operation runs: the conflict
   stays open, as under first_wins) or finds it held; and a person releasing it
   (``ledger.people.holds``) either sees this conflict or is seen releasing before it;
3. appends all audit events to the workspace's chain, after every row is written (the lock order,
   docs/architecture.md: rows, then the chain; a new row locks nothing another waits for);
4. takes a wake-up of the cluster, coalesced (as ``ledger.core.nudges.request_processing``): its
   row's KEY SHARE lock is the only lock taken after the chain, and the only other taker of that
   row, a processing task's DELETE (``nudges.begin_processing``), runs alone and holds no chain.
Python then enqueues the wake-up's tasks on commit (``nudges.wake``).
"""

from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from django.utils import timezone

from ledger.actions import ActionDefinition
from ledger.core import accounts, announcements, audit_chain, nudges
from ledger.core.rows import dumps, from_json, model_row
from ledger.keys import KEY_RECIPE
from ledger.models import AuditEvent, Conflict, Contribution, Delivery, OnConflict, Operation, Workspace
from ledger.states import State

Outcome = Delivery.Outcome

# What a hold writes (ledger_reserve, ledger_reserve_one): the error category a held operation
# carries while it waits in needs_review, and the kind of the move's audit event.
CONFLICT_HOLD = "conflict"
HELD = "conflict_held"


@dataclass
class Event:
    """A validated event, ready to reserve."""

    action: ActionDefinition
    data: dict
    key: str
    fingerprint: str
    sender_delivery_id: str
    correlation_id: str
    occurred_at: datetime | None
    # Set by ledger.intake.ordering.mark when the action's policy orders versions of one request.
    series: str = ""
    version: int | None = None
    ordered: str = ""

    def ordering_columns(self) -> dict:
        return {"series": self.series, "version": self.version, "ordered": self.ordered} if self.ordered else {}


def stale_delivery(workspace, event: Event, errors: list[dict], *, source: str, submitted_by: str, person) -> Delivery:
    """The delivery (unsaved) of an event refused as stale: too old for its key window, or an
    older version after a newer one (latest_wins). It names the key; it reserves nothing."""
    return Delivery(
        workspace=workspace,
        source=source,
        submitted_by=submitted_by,
        person=person,
        outcome=Outcome.STALE,
        errors=errors,
        action=event.action.name,
        key=event.key,
        sender_delivery_id=event.sender_delivery_id,
        correlation_id=event.correlation_id,
        occurred_at=event.occurred_at,
    )


@dataclass
class Reserved:
    outcome: str
    operation: Operation
    conflict: Conflict | None = None


def reserve(
    workspace: Workspace,
    events: list[Event],
    *,
    refused: list[Delivery],
    source: str,
    submitted_by: str,
    person,
    token: dict | None = None,
) -> list[Reserved]:
    """Record ``refused`` (invalid deliveries, unsaved) and reserve the operations of ``events``, in
    one transaction (the caller's, if any); one Reserved per event, in order.

    ``token``: the ``recheck`` of an API token taken from the process's cache
    (``accounts.cached_token``). The function checks it before writing anything and, if the token
    changed, writes nothing: ``accounts.TokenChanged``."""
    with accounts.token_checked():
        if len(events) == 1 and not refused:
            request = one_event_request(
                workspace, events[0], source=source, submitted_by=submitted_by, person=person, token=token
            )
            return _reserve(workspace, "SELECT ledger_reserve_one(%s::jsonb)", [dumps(request)])
        request = _request(workspace, events, refused=refused, source=source, submitted_by=submitted_by, person=person)
        if token is not None:
            request["token"] = token
        # A batch: the events' columns as typed arrays, one per column an event varies (the rest, the
        # same for every row, once in the request), not a JSON object per event.
        return _reserve(workspace, BATCH_CALL, [dumps(request), *_event_columns(events, request["now"])])


# ledger_reserve's arguments: the request, then the events' columns (``_event_columns``).
BATCH_CALL = (
    "SELECT ledger_reserve(%s::jsonb, %s::text[], %s::text[], %s::text[], %s::text[], %s::jsonb[], %s::text[], "
    "%s::text[], %s::timestamptz[], %s::text[], %s::int[], %s::text[], %s::text[], %s::timestamptz[])"
)


def _event_columns(events: list[Event], now: datetime) -> list[str]:
    """ledger_reserve's arrays, in its arguments' order, each as PostgreSQL's text of an array
    (``_array``): what each event sets of its operation (action, key, definition version,
    fingerprint, payload as JSON, correlation id, first state, deadline, series, version, ordering)
    and of its delivery (the sender's id, when it occurred)."""
    columns: list[list] = [[] for _ in range(13)]
    for event in events:
        ordered = bool(event.ordered)
        for column, value in zip(
            columns,
            (
                event.action.name,
                event.key,
                event.action.version,
                event.fingerprint,
                dumps(event.data),
                event.correlation_id,
                _first_state(event),
                event.action.first_deadline(now),
                event.series if ordered else "",
                event.version if ordered else None,
                event.ordered,
                event.sender_delivery_id,
                event.occurred_at,
            ),
            strict=True,
        ):
            column.append(value)
    return [_array(column) for column in columns]


def _array(values: list) -> str:
    """The text form of a PostgreSQL array of ``values`` (None: NULL), every element quoted: what
    the statement casts to the column's array type. psycopg's adaptation of a list quotes it element
    by element in Python, ~23 µs an event for a batch's arrays; this is one join."""
    return (
        "{"
        + ",".join(
            "NULL" if value is None else '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
            for value in values
        )
        + "}"
    )


def _reserve(workspace: Workspace, call: str, arguments: list) -> list[Reserved]:
    # One event and no refusal, nearly every request, has a function of its own that writes it in
    # plain statements (migration 0024); a batch is reserved set-based. The function leaves the
    # audit chains (the lanes its events go to) locked and its events to seal here (the key never
    # reaches the database), inserted before the commit.
    # A workspace with subscriptions announces its arrivals in their transaction, after their events
    # are in (ledger.core.announcements): the path that commits with the events' insert cannot.
    then = (lambda answer: _announce(workspace, answer)) if announcements.may_announce(workspace.pk) else None
    return reserved_from(workspace, audit_chain.in_one_transaction(call, arguments, _sealed_events, then=then))


def _announce(workspace, answer: dict) -> None:
    """The notifications of what the reservation changed: its events, with their ids, name the changes."""
    if not answer["audit"]:
        return
    operations = {row["id"]: from_json(Operation, row, workspace=workspace) for row in answer["operations"].values()}
    announcements.announce(announcements.of_rows(operations, answer["audit"][1]))


def _sealed_events(answer: dict) -> str | None:
    return audit_chain.sealed(*answer["audit"]) if answer["audit"] else None


def one_event_request(
    workspace, event: Event, *, source: str, submitted_by: str, person, token=None, now: datetime | None = None
) -> dict:
    """What ``ledger_reserve_one`` is given for ``event``."""
    request = shared_request(workspace, event, source=source, submitted_by=submitted_by, person=person, now=now)
    request["events"] = events_json([event], request["now"])
    if token is not None:
        request["token"] = token
    return request


def shared_request(
    workspace, event: Event, *, source: str, submitted_by: str, person, now: datetime | None = None
) -> dict:
    """``one_event_request`` but for the event's own rows (``events_json``): what every event of
    ``event``'s action from this sender shares, as a claim request sends it once for its claims of
    the action (``ledger.callers.claiming``, at the claim's own ``now``, so that what it creates and
    claims bears one time)."""
    return _request(workspace, [event], refused=[], source=source, submitted_by=submitted_by, person=person, now=now)


def _request(workspace, events, *, refused, source, submitted_by, person, now: datetime | None = None) -> dict:
    """What ``ledger_reserve`` is given: every row it may write, but for what only it knows."""
    now = now or timezone.now()
    rows = _rows(workspace.pk, source, submitted_by, person.pk if person is not None else None)
    return {
        "workspace_id": workspace.pk,
        "source": source,
        "now": now,
        "invalid": [model_row(refusal, received_at=now) for refusal in refused],
        "operation": {**rows["operation"], "created_at": now, "updated_at": now},
        "delivery": {**rows["delivery"], "received_at": now},
        "conflict": {**rows["conflict"], "created_at": now},
        "contribution": {**rows["contribution"], "created_at": now} if person is not None else None,
        "audit": {**rows["audit"], "created_at": now},
        "fingerprint_fields": {event.action.name: event.action.fingerprint_fields for event in events},
        "hold_actions": sorted({event.action.name for event in events if event.action.on_conflict == OnConflict.HOLD}),
    }


def events_json(events: list[Event], now: datetime) -> list[dict]:
    """ledger_reserve_one's events (one): each its operation's and its delivery's own columns (a
    claim sends its own beside the request's ``shared_request``)."""
    return [
        {
            "operation": {
                "action": event.action.name,
                "key": event.key,
                "definition_version": event.action.version,
                "fingerprint": event.fingerprint,
                "payload": event.data,
                "correlation_id": event.correlation_id,
                "state": _first_state(event),
                "deadline": event.action.first_deadline(now),
                **event.ordering_columns(),
            },
            # By column: the function reads these as a row of ledger_delivery.
            "delivery": {
                Delivery._meta.get_field("sender_delivery_id").column: event.sender_delivery_id,
                "occurred_at": event.occurred_at,
            },
        }
        for event in events
    ]


def reserved_from(workspace, answer: dict) -> list[Reserved]:
    """What ``ledger_reserve`` answered, as model instances; the wake-up it took, asked for on commit."""
    operations = {key: from_json(Operation, row, workspace=workspace) for key, row in answer["operations"].items()}
    reserved = []
    for found in answer["results"]:
        operation = operations[found["key"]]
        conflict = from_json(Conflict, found["conflict"], operation=operation) if found["conflict"] else None
        reserved.append(Reserved(found["outcome"], operation, conflict))
    wake(answer)
    return reserved


def wake(answer: dict) -> None:
    """The wake-up ``ledger_reserve`` took, and the tasks its accepted events call for, asked for on
    commit (``reserved_from`` does it; a caller that needs no instances of the answer calls this)."""
    accepted = sum(found["outcome"] == Outcome.ACCEPTED for found in answer["results"])
    if accepted:
        nudges.wake(accepted=accepted, took_wakeup=answer["wake"])


@lru_cache(maxsize=1024)
def _rows(workspace_id: int, source: str, submitted_by: str, person_id: int | None) -> dict[str, dict]:
    """The rows of the models, as Django would write them (every column), for one sender: each
    event then sets what it decides, and ledger_reserve fills in what only the database knows (ids,
    outcomes, a conflict's differences, the audit chain). Built once per sender and process."""
    return {
        "operation": model_row(Operation(workspace_id=workspace_id, key_recipe=KEY_RECIPE, submitted_by=submitted_by)),
        "delivery": model_row(
            Delivery(workspace_id=workspace_id, source=source, submitted_by=submitted_by, person_id=person_id)
        ),
        "conflict": model_row(Conflict()),
        # The person behind a new operation, when there is one (the request then names them).
        "contribution": (
            model_row(Contribution(user_id=person_id, kind=Contribution.Kind.SUBMITTED))
            if person_id is not None
            else {}
        ),
        "audit": model_row(AuditEvent(workspace_id=workspace_id, actor=submitted_by or source)),
    }


def _first_state(event: Event) -> str:
    return State.PENDING_APPROVAL if event.action.consequential else State.PENDING
