"""Reads shared by the engine, the console and the metrics: what is held, what is due."""

import heapq
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from ledger.actions import registry
from ledger.core import held_time
from ledger.models import Control, Operation, Ordering
from ledger.states import CLAIMABLE_STATES, TERMINAL_STATES, UNFINISHED_STATES


def scope_filter(workspace_id: int | None, action: str) -> Q:
    """The operations one pause switch covers (no workspace and no action: all of them)."""
    scope = Q(pk__isnull=False)
    if workspace_id is not None:
        scope &= Q(workspace_id=workspace_id)
    if action:
        scope &= Q(action=action)
    return scope


def paused_filter(switches: list[Control] | None = None) -> Q | None:
    """A filter matching the operations that the active pause switches (``switches``, already
    read, or read here) hold.

    Returns None when nothing is paused. A global pause matches everything.
    """
    held = None
    scopes = (
        [(switch.workspace_id, switch.action) for switch in switches]
        if switches is not None
        else Control.objects.filter(paused=True).values_list("workspace_id", "action")
    )
    for workspace_id, action in scopes:
        scope = scope_filter(workspace_id, action)
        held = scope if held is None else held | scope
    return held


def claimable_now(now: datetime | None = None, switches: list[Control] | None = None):
    """Operations someone may claim now, a worker or (for a caller-performed action) its caller:
    claimable, due, within their deadline, not paused, not waiting for an earlier version
    (``ledger.intake.ordering``, in_order)."""
    now = now or timezone.now()
    queryset = Operation.objects.filter(
        Q(state__in=CLAIMABLE_STATES),
        Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now),
        held_time.within_deadline(now),
    ).exclude(waiting())
    held = paused_filter(switches)
    return queryset.exclude(held) if held is not None else queryset


def due_operations(now: datetime | None = None, switches: list[Control] | None = None):
    """Operations a worker may claim now (``claimable_now``), of an action the workers perform: a
    caller-performed one waits for its caller's claim (``due_caller_operations``)."""
    queryset = claimable_now(now, switches)
    if callers := caller_actions():
        queryset = queryset.exclude(action__in=callers)
    return queryset


def due_caller_operations(now: datetime | None = None, switches: list[Control] | None = None):
    """What "due" means for a caller-performed action (``ledger.callers``): an operation its caller
    may claim now (``claimable_now``). The one definition ``GET /api/v1/claims/due``, the
    ``operation.due`` notification (``ledger.core.announcements``), /metrics and the console's
    queue read."""
    return claimable_now(now, switches).filter(action__in=caller_actions())


def caller_actions() -> list[str]:
    """The registered actions their callers perform (``ActionDefinition.performed_by``)."""
    return sorted(name for name, action in registry.items() if action.performed_by_caller)


def in_a_series():
    """The operations that have a series (``ledger.intake.ordering``), said so that the planner can use
    their partial index (operation_series_idx), which only they are in."""
    return Operation.objects.exclude(series="")


def waiting() -> Q:
    """The ``in_order`` versions that wait: their predecessor is not finished (or has not arrived)."""
    finished_predecessor = in_a_series().filter(
        workspace_id=OuterRef("workspace_id"),
        series=OuterRef("series"),
        version=OuterRef("version") - 1,
        state__in=TERMINAL_STATES,
    )
    return Q(ordered=Ordering.IN_ORDER, version__gt=1) & Q(~Exists(finished_predecessor))


@contextmanager
def read_in_index_order():
    """Plan the statements inside without an explicit sort, in a transaction (the caller's, if
    any): for the reads of a backlog in the order of an index made for them.

    The claim wants the first due operations in arrival order, the age of the oldest due operation
    the first of them, the service levels a range per action. Read along their indexes
    (``operation_claim_order_idx``, ``operation_unfinished_idx``) they cost what they return; the
    planner prefers, on statistics that never were (autovacuum is off here) or that spread the
    backlog evenly over the table, to sort every due row (20 ms for a claim behind a backlog of
    20,000, spilling to disk; 107 ms for the oldest behind 330,000) or to walk another index
    through every finished operation before the backlog (77 ms behind 300,000 of them). Without the
    sort, the index is the cheapest order.
    """
    with transaction.atomic(savepoint=False):
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_sort = off")
        yield
        # Not in a ``finally``: after an error the transaction (or savepoint) is rolled back, which
        # undoes the SET LOCAL too, and a statement here would only hide the error behind its own.
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_sort TO DEFAULT")


def oldest_due_seconds(
    now: datetime | None = None, switches: list[Control] | None = None, *, workspace_ids: set[int] | None = None
) -> float | None:
    """How long the oldest due operation (of ``workspace_ids``, None: of all) has waited to be
    claimed; None when nothing is due."""
    now = now or timezone.now()
    # In the claim's order, so that the first entries of its index (operation_claim_order_idx)
    # answer, however long the backlog.
    with read_in_index_order():
        oldest = (
            _within(due_operations(now, switches), workspace_ids)
            .order_by("created_at", "id")
            .values_list("created_at", flat=True)
            .first()
        )
    return (now - oldest).total_seconds() if oldest else None


def due_since() -> Coalesce:
    """When a claimable operation became due: its arrival, or the next attempt a retry put it off
    to (the second key of ``operation_due_since_idx``, written the same way for the planner)."""
    return Coalesce("next_attempt_at", "created_at")


def oldest_due_by_action(operations, actions) -> dict[str, datetime]:
    """Per action of ``actions``, when the longest-waiting of ``operations`` (a queryset of due
    ones) became due: its arrival, or the time of the next attempt a retry put it off to. Actions
    none of whose operations is due are left out.

    Each action's is the first entry of its range of ``operation_due_since_idx``
    (action, that time) that is due: one read per action that stops at its first match (the ones
    not yet due come after every due one), all in one statement. A minimum over the due rows
    instead read every one of them: 1.5 s behind a day's backlog of 100,000."""
    if not actions:
        return {}
    waited = operations.order_by().annotate(since=due_since())
    firsts = [waited.filter(action=action).order_by("since").values_list("action", "since")[:1] for action in actions]
    with read_in_index_order():
        return dict(firsts[0].union(*firsts[1:], all=True))


AT_RISK_SHARE = 0.8  # past this share of its service level, an unfinished operation is at risk
WORST = 100  # the at-risk and late operations listed, oldest first
COUNT_CAP = 10_000  # counted no further: "10,000+" (a backlog may hold millions)


@dataclass(frozen=True)
class ServiceLevel:
    action: str
    level: timedelta
    at_risk: int  # unfinished, past AT_RISK_SHARE of the level, not yet late (at most COUNT_CAP)
    late: int  # unfinished, past the level (at most COUNT_CAP)
    at_risk_capped: bool = False  # more than COUNT_CAP at risk
    late_capped: bool = False


def service_level_standing(operations, now: datetime | None = None) -> tuple[list[ServiceLevel], list]:
    """Per action with a service level, how many unfinished ``operations`` (a queryset, already
    narrowed to what the person may see) are at risk or late, counted up to ``COUNT_CAP``; and the
    oldest of them (at most ``WORST``), each with ``age`` and ``late`` set.

    Three queries per action, each a range of ``operation_unfinished_idx`` (action, arrival): two
    capped counts and the action's oldest ``WORST``, merged here. One query over every action would
    have to gather and sort all of their late operations, a whole backlog."""
    now = now or timezone.now()
    levels, oldest = [], []
    level_of: dict[str, timedelta] = {}
    with read_in_index_order():
        for name, action in sorted(registry.items()):
            if action.service_level is None:
                continue
            level_of[name] = action.service_level
            risk_since, late_since = now - action.service_level * AT_RISK_SHARE, now - action.service_level
            unfinished = operations.filter(state__in=UNFINISHED_STATES, action=name).order_by()
            at_risk = capped_count(unfinished.filter(created_at__lt=risk_since, created_at__gte=late_since))
            late = capped_count(unfinished.filter(created_at__lt=late_since))
            levels.append(
                ServiceLevel(
                    name,
                    action.service_level,
                    min(at_risk, COUNT_CAP),
                    min(late, COUNT_CAP),
                    at_risk_capped=at_risk > COUNT_CAP,
                    late_capped=late > COUNT_CAP,
                )
            )
            oldest += (
                unfinished.filter(created_at__lt=risk_since)
                .select_related("workspace")
                .order_by("created_at", "id")[:WORST]
            )
    listed = heapq.nsmallest(WORST, oldest, key=lambda operation: (operation.created_at, operation.pk))
    for operation in listed:
        level = level_of[operation.action]
        operation.age = now - operation.created_at
        operation.late = standing(operation.age, level) == "late"
        operation.service_level = level
    return levels, listed


def capped_count(rows) -> int:
    """How many ``rows`` (a queryset) there are, counted no further than ``COUNT_CAP + 1``: more
    than COUNT_CAP reads as COUNT_CAP + 1, and only that many rows are read."""
    return rows.order_by()[: COUNT_CAP + 1].count()


def standing(age: timedelta, level: timedelta) -> str:
    """ "late" past the service level, "at_risk" past ``AT_RISK_SHARE`` of it, else ""."""
    if age > level:
        return "late"
    return "at_risk" if age > level * AT_RISK_SHARE else ""


def held_operations(switches: list[Control] | None = None):
    """The operations a pause holds: claimable (pending, retrying) and in a paused scope (of
    ``switches``, the active ones, when already read). None of them when nothing is paused."""
    held = paused_filter(switches)
    if held is None:
        return Operation.objects.none()
    return Operation.objects.filter(state__in=CLAIMABLE_STATES).filter(held)


def held_due_operations(now: datetime, switches: list[Control] | None = None):
    """The operations a pause holds that would be due without it (never put off, or their retry's
    time has come)."""
    return held_operations(switches).filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))


def holding_switch(operation: Operation, switches: list[Control]) -> Control | None:
    """The first active switch (of ``switches``, the paused ones) whose scope holds ``operation``."""
    if operation.state not in CLAIMABLE_STATES:
        return None
    return switch_over(switches, operation.workspace_id, operation.action)


def switch_over(switches: list[Control], workspace_id: int, action: str) -> Control | None:
    """The first of ``switches`` whose scope covers ``action`` in the workspace ``workspace_id``."""
    for switch in switches:
        if switch.workspace_id in (None, workspace_id) and switch.action in ("", action):
            return switch
    return None


def oldest_held_seconds(
    now: datetime | None = None, switches: list[Control] | None = None, *, workspace_ids: set[int] | None = None
) -> float | None:
    """How long the oldest operation a pause holds (of ``workspace_ids``, None: of all) has been due
    (None: a pause holds nothing due)."""
    now = now or timezone.now()
    return _oldest_due_seconds(held_due_operations(now, switches), now, workspace_ids)


def oldest_caller_due_seconds(
    now: datetime | None = None, switches: list[Control] | None = None, *, workspace_ids: set[int] | None = None
) -> float | None:
    """How long the oldest operation its caller may claim (of ``workspace_ids``, None: of all) has
    been due (None: nothing waits for a caller's claim)."""
    now = now or timezone.now()
    return _oldest_due_seconds(due_caller_operations(now, switches), now, workspace_ids)


def _oldest_due_seconds(operations, now: datetime, workspace_ids: set[int] | None) -> float | None:
    oldest = (
        _within(operations, workspace_ids).annotate(since=due_since()).order_by("since").values_list("since", flat=True)
    ).first()
    return (now - oldest).total_seconds() if oldest else None


def _within(operations, workspace_ids: set[int] | None):
    return operations if workspace_ids is None else operations.filter(workspace_id__in=workspace_ids)
