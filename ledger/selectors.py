"""Reads shared by the engine, the console and the metrics: what is held, what is due."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Exists, OuterRef, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from ledger.actions import registry
from ledger.models import Control, Operation, Ordering
from ledger.states import CLAIMABLE_STATES, TERMINAL_STATES


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
    scopes = [(switch.workspace_id, switch.action) for switch in switches] if switches is not None else \
        Control.objects.filter(paused=True).values_list("workspace_id", "action")
    for workspace_id, action in scopes:
        scope = scope_filter(workspace_id, action)
        held = scope if held is None else held | scope
    return held


def due_operations(now: datetime | None = None, switches: list[Control] | None = None):
    """Operations a worker may claim now: claimable, due, within their deadline, not paused, and
    not waiting for an earlier version (``ledger.ordering``, in_order)."""
    now = now or timezone.now()
    queryset = Operation.objects.filter(
        Q(state__in=CLAIMABLE_STATES),
        Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now),
        Q(deadline__isnull=True) | Q(deadline__gt=now),
    ).exclude(waiting())
    held = paused_filter(switches)
    return queryset.exclude(held) if held is not None else queryset


def in_a_series():
    """The operations that have a series (``ledger.ordering``), said so that the planner can use
    their partial index (operation_series_idx), which only they are in."""
    return Operation.objects.exclude(series="")


def waiting() -> Q:
    """The ``in_order`` versions that wait: their predecessor is not finished (or has not arrived)."""
    finished_predecessor = in_a_series().filter(
        workspace_id=OuterRef("workspace_id"), series=OuterRef("series"), version=OuterRef("version") - 1,
        state__in=TERMINAL_STATES)
    return Q(ordered=Ordering.IN_ORDER, version__gt=1) & ~Exists(finished_predecessor)


def oldest_due_seconds(now: datetime | None = None, switches: list[Control] | None = None, *,
                       workspace_ids: set[int] | None = None) -> float | None:
    """How long the oldest due operation (of ``workspace_ids``, None: of all) has waited to be
    claimed; None when nothing is due."""
    now = now or timezone.now()
    oldest = _within(due_operations(now, switches), workspace_ids).order_by("created_at").values_list(
        "created_at", flat=True).first()
    return (now - oldest).total_seconds() if oldest else None


AT_RISK_SHARE = 0.8  # past this share of its service level, an unfinished operation is at risk
WORST = 100  # the at-risk and late operations listed, oldest first


@dataclass(frozen=True)
class ServiceLevel:
    action: str
    level: timedelta
    at_risk: int  # unfinished, past AT_RISK_SHARE of the level, not yet late
    late: int  # unfinished, past the level


def service_level_standing(operations, now: datetime | None = None) -> tuple[list[ServiceLevel], list]:
    """Per action with a service level, how many unfinished ``operations`` (a queryset, already
    narrowed to what the person may see) are at risk or late; and the oldest of them (at most
    ``WORST``), each with ``age`` and ``late`` set. One query per action, one for the list."""
    now = now or timezone.now()
    unfinished = operations.exclude(state__in=TERMINAL_STATES)
    levels, worst = [], Q(pk__in=[])
    for name, action in sorted(registry.items()):
        if action.service_level is None:
            continue
        risk_since, late_since = now - action.service_level * AT_RISK_SHARE, now - action.service_level
        counts = unfinished.filter(action=name, created_at__lt=risk_since).aggregate(
            at_risk=Count("pk", filter=Q(created_at__gte=late_since)),
            late=Count("pk", filter=Q(created_at__lt=late_since)))
        levels.append(ServiceLevel(name, action.service_level, counts["at_risk"], counts["late"]))
        worst |= Q(action=name, created_at__lt=risk_since)
    listed = list(unfinished.filter(worst).select_related("workspace").order_by("created_at", "id")[:WORST])
    for operation in listed:
        level = registry[operation.action].service_level
        operation.age = now - operation.created_at
        operation.late = standing(operation.age, level) == "late"
        operation.service_level = level
    return levels, listed


def standing(age: timedelta, level: timedelta) -> str:
    """"late" past the service level, "at_risk" past ``AT_RISK_SHARE`` of it, else ""."""
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


def holding_switch(operation: Operation, switches: list[Control]) -> Control | None:
    """The first active switch (of ``switches``, the paused ones) whose scope holds ``operation``."""
    if operation.state not in CLAIMABLE_STATES:
        return None
    for switch in switches:
        if switch.workspace_id in (None, operation.workspace_id) and switch.action in ("", operation.action):
            return switch
    return None


def oldest_held_seconds(now: datetime | None = None, switches: list[Control] | None = None, *,
                        workspace_ids: set[int] | None = None) -> float | None:
    """How long the oldest operation a pause holds (of ``workspace_ids``, None: of all) has been due
    (None: a pause holds nothing due)."""
    now = now or timezone.now()
    oldest = (_within(held_operations(switches), workspace_ids)
              .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
              .annotate(since=Coalesce("next_attempt_at", "created_at")).order_by("since")
              .values_list("since", flat=True).first())
    return (now - oldest).total_seconds() if oldest else None


def _within(operations, workspace_ids: set[int] | None):
    return operations if workspace_ids is None else operations.filter(workspace_id__in=workspace_ids)
