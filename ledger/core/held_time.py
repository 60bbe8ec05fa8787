"""Held time: the time a pause held an operation does not count against its processing deadline.

A released switch keeps the interval it was pulled (``PauseInterval``); nothing else is written at
the resume, however much it held. An operation is given the intervals that ended since its state
last moved when it is next claimed (``with_held_time``): the claim rewrites its row anyway. Until
then, due work and the sweep's late work read its deadline with the held time given
(``deadline_passed``), so nothing held is treated as late. The arithmetic is the database's
(``ledger/core/sql/held_deadline.sql``), once.
"""

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypeAlias, TypedDict

from django.db.models import Case, DateTimeField, DurationField, F, Func, Q, QuerySet, Subquery, Value, When
from django.db.models.functions import Coalesce
from django.db.models.lookups import GreaterThan, LessThan, LessThanOrEqual

from ledger.actions import ActionDefinition, registry
from ledger.models import Control, Operation, PauseInterval

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class HeldTime(TypedDict):
    held_deadline: datetime | None


# An operation read by ``with_held_time``.
HeldOperation: TypeAlias = "WithAnnotations[Operation, HeldTime]"


def keep_interval(control: Control, now: datetime) -> timedelta:
    """Keep the time ``control`` held its scope, as it is released; returns how long that was."""
    if control.paused_since is None:
        return timedelta(0)
    PauseInterval.objects.create(
        workspace_id=control.workspace_id, action=control.action, started_at=control.paused_since, ended_at=now
    )
    return now - control.paused_since


def _since():
    return Coalesce(F("state_changed_at"), F("created_at"))


def _whole_deadline():
    """Each operation's whole processing deadline, the cap of what a pause gives back."""
    return Case(
        *(When(action=name, then=Value(action.deadline)) for name, action in sorted(registry.items())),
        default=Value(ActionDefinition.deadline),  # an action no longer registered: the default deadline
        output_field=DurationField(),
    )


def _last_release():
    """When the last pause ended: one lookup per statement (an uncorrelated subquery), so a row
    changed since then is read as it is, without asking the function."""
    return Subquery(PauseInterval.objects.order_by("-ended_at").values("ended_at")[:1])


class _HeldDeadline(Func):
    function = "ledger_held_deadline"
    output_field = DateTimeField()


def held_deadline():
    """An operation's deadline with the held time it is owed given (its deadline as stored when no
    pause has ended since its state last moved)."""
    return Case(
        When(
            LessThan(_since(), _last_release()),
            then=_HeldDeadline(F("deadline"), _since(), F("workspace_id"), F("action"), _whole_deadline()),
        ),
        default=F("deadline"),
        output_field=DateTimeField(),
    )


def with_held_time(operations: QuerySet[Operation]) -> "QuerySet[HeldOperation]":
    """``operations`` each read with its held time given, as ``held_deadline`` (a claim writes it)."""
    return operations.annotate(held_deadline=held_deadline())


def within_deadline(now: datetime) -> Q:
    """Operations whose processing deadline, held time given, has not passed at ``now``."""
    return Q(deadline__isnull=True) | Q(deadline__gt=now) | Q(GreaterThan(held_deadline(), now))


def deadline_passed(now: datetime) -> Q:
    """Operations whose processing deadline, held time given, passed at ``now``."""
    return Q(deadline__lte=now) & Q(LessThanOrEqual(held_deadline(), now))
