"""Announcing changes to a workspace's subscriptions (``ledger.models.Subscription``): each change an
active subscription asked for becomes a ``notify-subscriber`` operation (``ledger.actions.notify``),
reserved in the transaction of the change itself, so a change that commits is announced and one that
rolls back is not.

What is announced, from the audit event every change writes (its id names the change, so the same
change never yields two notifications: the key is per subscription, change and event):

| change                                                          | event                        |
| --------------------------------------------------------------- | ---------------------------- |
| a caller-performed action's operation to pending or retrying    | operation.due                |
| to needs_review                                                 | operation.needs_review       |
| to unknown                                                      | operation.unknown            |
| to pending_approval (arrived, or replayed, consequential)       | operation.awaiting_approval  |
| to succeeded                                                    | operation.succeeded          |
| a delivery that reused a key with another payload (intake)      | operation.conflict           |
| a pause released: each caller operation it held that is due now | operation.due                |
| an ``in_order`` version finished: its successor, due now        | operation.due                |

``operation.due`` is sent once the operation may be claimed: a retry put off is announced at its
next try's time; an ``in_order`` version waiting for its predecessor, when the predecessor finishes
(not before: its claim would be answered ``waiting``). An operation reserved by its caller's own
claim (``quiet_due``) is not announced as due: the claimer is taking it. An operation that becomes
due while a pause holds it is announced all the same (its claim is answered 423 held), and again
when the pause is released (``announce_released``): the resume is a change of its own. Notification
operations are never announced themselves.

The changes come from the three places operations change: ``ledger.core.transitions`` (every move
made in Python), intake's reservation (``ledger.intake.reservation``: arrivals, holds, conflicts)
and the claim that finishes internal sets (``ledger.engine.succeeded``). Subscriptions are read
once every ``CACHE_SECONDS`` per process (one small query), and at once after a save in it.
"""

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from functools import partial

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from ledger import keys
from ledger.actions import registry
from ledger.actions.notify import NAME as NOTIFY
from ledger.core import audit_chain, nudges, selectors
from ledger.models import AuditEvent, Operation, Ordering, Subscription
from ledger.states import CLAIMABLE_STATES, TERMINAL_STATES, State

ACTOR = "opsconsole"
CONFLICT = "operation.conflict"
DUE = "operation.due"
BY_STATE = {
    State.NEEDS_REVIEW: "operation.needs_review",
    State.UNKNOWN: "operation.unknown",
    State.PENDING_APPROVAL: "operation.awaiting_approval",
    State.SUCCEEDED: "operation.succeeded",
}
# The audit kind intake writes for a delivery that conflicts with the recorded payload.
CONFLICT_KIND = "conflict_detected"
# The states whose moves may announce something (a finished version, its waiting successor): any
# other move costs nothing here.
ANNOUNCING_STATES = frozenset(BY_STATE) | CLAIMABLE_STATES | TERMINAL_STATES

CACHE_SECONDS = 2.0


@dataclass(frozen=True)
class Listener:
    """An active subscription as the announcer reads it."""

    id: int
    name: str
    workspace_slug: str
    url: str
    events: frozenset[str]
    secret_env: str


_cache: dict = {"at": float("-inf"), "by_workspace": {}}
_quiet_due: ContextVar[bool] = ContextVar("quiet_due", default=False)


def clear_cache() -> None:
    """Read the subscriptions again at the next look (after a save in this process)."""
    _cache["at"] = float("-inf")


def assume_none() -> None:
    """Know, without asking, that no workspace has a subscription (the tests' empty database)."""
    _cache["by_workspace"], _cache["at"] = {}, time.monotonic()


def listeners(workspace_id: int) -> list[Listener]:
    """The active subscriptions of the workspace, cached (the module's note)."""
    return _by_workspace().get(workspace_id, [])


def _by_workspace() -> dict[int, list[Listener]]:
    """Every workspace's active subscriptions, read again when the cache is older than ``CACHE_SECONDS``."""
    if time.monotonic() - _cache["at"] > CACHE_SECONDS:
        found: dict[int, list[Listener]] = {}
        for row in Subscription.objects.filter(active=True).select_related("workspace"):
            found.setdefault(row.workspace_id, []).append(
                Listener(row.pk, row.name, row.workspace.slug, row.url, frozenset(row.events), row.secret_env)
            )
        _cache["by_workspace"], _cache["at"] = found, time.monotonic()
    return _cache["by_workspace"]


@contextmanager
def quiet_due() -> Iterator[None]:
    """Within it, an operation reserved is not announced as due: its caller's claim is taking it."""
    token = _quiet_due.set(True)
    try:
        yield
    finally:
        _quiet_due.reset(token)


@dataclass(frozen=True)
class Change:
    """One change of ``operation`` (as it is after it), written as audit event ``change``."""

    operation: Operation
    change: int
    kind: str
    to_state: str


def event_of(change: Change) -> str:
    """What ``change`` announces ("": nothing)."""
    operation = change.operation
    if operation.action == NOTIFY:
        return ""
    if change.kind == CONFLICT_KIND:
        return CONFLICT
    if change.to_state in BY_STATE:
        return BY_STATE[State(change.to_state)]
    if change.to_state in CLAIMABLE_STATES:
        action = registry.get(operation.action)
        quiet = change.kind == "reserved" and _quiet_due.get()
        caller = action is not None and action.performed_by_caller
        return DUE if caller and not quiet and not _waits(operation) else ""
    return ""


def _waits(operation: Operation) -> bool:
    """An ``in_order`` version whose predecessor has not finished: its claim is answered ``waiting``,
    so it is not due; it is announced when the predecessor finishes (``_successors_released``)."""
    if operation.ordered != Ordering.IN_ORDER or operation.version is None or operation.version <= 1:
        return False
    return Operation.objects.filter(pk=operation.pk).filter(selectors.waiting()).exists()


def _successors_released(changes: list[Change]) -> list[Change]:
    """For each change that finished an ``in_order`` version, the change of its successor that may be
    claimed now: the version was waiting, in silence, for this one (its own change, the same audit
    event, announces it). One query for all of them (a bulk cancel finishes many)."""
    finished = {
        (change.operation.workspace_id, change.operation.series, change.operation.version + 1): change
        for change in changes
        if change.to_state in TERMINAL_STATES
        and change.operation.ordered == Ordering.IN_ORDER
        and change.operation.version is not None  # not versioned: nothing follows it
    }
    if not finished:
        return []
    wanted = Q()
    for workspace_id, series, version in finished:
        wanted |= Q(workspace_id=workspace_id, series=series, version=version)
    released = []
    for successor in selectors.due_caller_operations().filter(wanted):
        change = finished[(successor.workspace_id, successor.series, successor.version)]
        released.append(Change(successor, change.change, change.kind, successor.state))
    return released


def of_moves(operations: Iterable[Operation], events: Iterable[AuditEvent]) -> list[Change]:
    """The changes of moved ``operations`` (as they are now) and their audit ``events``, in pairs."""
    return [
        Change(operation, event.pk, event.kind, event.to_state)
        for operation, event in zip(operations, events, strict=True)
    ]


def of_rows(operations: dict[int, Operation], rows: Iterable[dict]) -> list[Change]:
    """The changes of audit event ``rows`` (as a SQL function returned them, with their ids) of
    ``operations`` (by id)."""
    return [
        Change(operations[row["operation_id"]], row["id"], row.get("kind", ""), row.get("to_state") or "")
        for row in rows
        if row.get("operation_id") in operations
    ]


def announce_released(scope, resumed: AuditEvent) -> list[Operation]:
    """Announce ``operation.due`` for the caller operations in ``scope`` (the released switch's
    operations, a Q) that may be claimed now, the ``resumed`` audit event their change: without it,
    work a pause held would wait in silence for a caller that was told it is held. Runs in the
    resume's transaction, after the switch is saved, so a switch still pulled over them keeps them."""
    listening = sorted(_by_workspace())
    if not listening:
        return []
    held = selectors.due_caller_operations().filter(scope, workspace_id__in=listening).order_by("id")
    return announce([Change(operation, resumed.pk, resumed.kind, operation.state) for operation in held])


def may_announce(workspace_id: int) -> bool:
    """Whether any change of the workspace could be announced now (it has an active subscription)."""
    return bool(listeners(workspace_id))


def announce(changes: list[Change], *, now: datetime | None = None) -> list[Operation]:
    """Reserve the notifications of ``changes`` for the subscriptions that asked for them: new
    ``notify-subscriber`` operations and their audit events, in the caller's transaction (after the
    changes' own events: only new rows, as the lock order asks), and a worker woken when it commits.
    Returns the notifications reserved."""
    rows: list[Operation] = []
    # The listeners first: a workspace without subscriptions (the usual case) costs a dict lookup
    # per change, never the event's reading (a registry look-up for a due one) nor a query.
    heard = [change for change in changes if listeners(change.operation.workspace_id)]
    for change in heard + _successors_released(heard):
        if not (event := event_of(change)):
            continue
        now = now or timezone.now()
        rows.extend(
            _notification(registry[NOTIFY], listener, change, event, now)
            for listener in listeners(change.operation.workspace_id)
            if event in listener.events
        )
    if not rows:
        return []
    with transaction.atomic(savepoint=False):
        created = Operation.objects.bulk_create(rows)
        audit_chain.append(
            [
                AuditEvent(
                    operation=row,
                    workspace_id=row.workspace_id,
                    actor=ACTOR,
                    kind="reserved",
                    to_state=State.PENDING,
                    message=f"{row.payload['event']} of {row.payload['about']} for {row.payload['subscription_name']}",
                )
                for row in created
            ]
        )
        due_now = [row for row in created if row.next_attempt_at is None]
        if due_now:
            nudges.request_processing(accepted=len(due_now))
        for at in sorted({row.next_attempt_at for row in created if row.next_attempt_at is not None}):
            transaction.on_commit(partial(nudges.enqueue_processing, at=at))
    return created


def _notification(action, listener: Listener, change: Change, event: str, now: datetime) -> Operation:
    operation = change.operation
    identity = {"subscription": listener.id, "change": change.change, "event": event, "operation": operation.pk}
    payload = {
        **identity,
        "subscription_name": listener.name,
        "about": operation.key,
        "url": listener.url,
        "secret_env": listener.secret_env,
        "body": body(operation, event, now, state=change.to_state, workspace_slug=listener.workspace_slug),
    }
    # A retry put off is due at its next try's time: announced then, not before.
    later = (
        operation.next_attempt_at
        if event == DUE and operation.next_attempt_at and operation.next_attempt_at > now
        else None
    )
    return Operation(
        workspace_id=operation.workspace_id,
        action=NOTIFY,
        key=keys.build_key(listener.workspace_slug, NOTIFY, list(identity.items())),
        key_recipe=keys.KEY_RECIPE,
        definition_version=action.version,
        fingerprint=keys.fingerprint(payload, action.fingerprint_fields),
        payload=payload,
        submitted_by=ACTOR,
        state=State.PENDING,
        next_attempt_at=later,
        deadline=(later or now) + action.deadline,
        created_at=now,
        updated_at=now,
    )


def body(operation: Operation, event: str, now: datetime, *, state: str, workspace_slug: str) -> dict:
    """What a receiver is told, in the Standard Webhooks payload shape (type, timestamp, data): the
    operation's key, action, ``state`` (the one it moved to; "": as it is), summary and console
    page; never a payload field (a summary leaves out what is sensitive)."""
    action = registry.get(operation.action)
    return {
        "type": event,
        "timestamp": now.isoformat(),
        "data": {
            "workspace": workspace_slug,
            "key": operation.key,
            "action": operation.action,
            "state": state or operation.state,
            "summary": action.summarise(operation.payload) if action is not None else "",
            "next_attempt_at": operation.next_attempt_at.isoformat() if operation.next_attempt_at else None,
            "link": settings.OPSCONSOLE_SITE_URL + reverse("console:operation", args=[operation.pk]),
        },
    }
