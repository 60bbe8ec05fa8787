"""The configured destinations as the console shows them: their limits in words and the state of
their circuit breakers (``ledger.engine.limits`` keeps it in ``DestinationHealth``), and, for one
operation, whether it waits for a paused destination.

Reads only: two queries for the dashboard's panel (the destinations, their rows), at most one for
an operation's page.
"""

from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from ledger.actions import UnknownAction, get_action
from ledger.models import Destination, DestinationHealth, Operation
from ledger.states import State


@dataclass(frozen=True)
class DestinationStatus:
    slug: str
    actions: list[str]
    breaker: str  # closed, open, probing, probe due (``DestinationHealth.breaker``)
    failures_in_row: int
    paused_until: datetime | None  # while open or probing
    limits: list[str]  # each limit in words

    @property
    def troubled(self) -> bool:
        return self.breaker != "closed"


@dataclass(frozen=True)
class Waiting:
    """An operation given back untried because its destination's calls are paused."""

    destination: str
    until: datetime | None  # the end of the pause (None: a probe call is deciding)
    failures_in_row: int

    @property
    def probing(self) -> bool:
        return self.until is None


def destinations(*, now: datetime | None = None) -> list[DestinationStatus]:
    """Every configured destination, by slug, with its limits and its breaker."""
    now = now or timezone.now()
    rows = list(Destination.objects.prefetch_related("actions").order_by("slug"))
    names = [DestinationHealth.row_of(destination.slug) for destination in rows]
    health = {row.name: row for row in DestinationHealth.objects.filter(name__in=names)}
    statuses = []
    for destination in rows:
        row = health.get(DestinationHealth.row_of(destination.slug)) or DestinationHealth()
        breaker = row.breaker(now)
        statuses.append(
            DestinationStatus(
                slug=destination.slug,
                actions=sorted(action.name for action in destination.actions.all()),
                breaker=breaker,
                failures_in_row=row.failures_in_row,
                paused_until=row.breaker_until if breaker in ("open", "probing") else None,
                limits=limits_in_words(destination),
            )
        )
    return statuses


def limits_in_words(destination: Destination) -> list[str]:
    words = []
    if destination.rate_limit_per_second:
        words.append(f"at most {destination.rate_limit_per_second:g} calls a second")
    words.append(f"at most {destination.max_concurrency} in flight")
    if destination.breaker_threshold:
        failures = "failure" if destination.breaker_threshold == 1 else f"{destination.breaker_threshold} failures"
        words.append(
            f"after {failures} in a row, calls pause for {destination.breaker_cooldown_seconds} s, then one probe call"
        )
    else:
        words.append("no circuit breaker")
    return words


def waiting_for(operation: Operation, *, now: datetime | None = None) -> Waiting | None:
    """Whether ``operation`` waits for its destination's breaker: retrying, of an action whose
    destination has one, and that breaker not closed."""
    if operation.state != State.RETRYING:
        return None
    try:
        action = get_action(operation.action)
    except UnknownAction:
        return None
    if not action.external or not action.limits().breaker_threshold:
        return None
    destination = action.destination_name()
    row = DestinationHealth.objects.filter(name=DestinationHealth.row_of(destination)).first()
    if row is None:
        return None
    breaker = row.breaker(now or timezone.now())
    if breaker == "closed":
        return None
    return Waiting(destination, row.breaker_until if breaker == "open" else None, row.failures_in_row)
