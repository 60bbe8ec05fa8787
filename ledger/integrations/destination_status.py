"""The destinations, configured or coded, as the console shows them: their limits in words and the state of
their circuit breakers (``ledger.engine.limits`` keeps it in ``DestinationHealth``), and, for one
operation, whether it waits for a paused destination.

Reads only: two queries for the dashboard's panel (the destinations, their rows), at most one for
an operation's page.
"""

from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from ledger.actions import UnknownAction, get_action, registry
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
    """Every destination the actions call, configured or coded, by the name people read
    (``destination_label``), with its limits and its breaker."""
    now = now or timezone.now()
    rows = list(Destination.objects.prefetch_related("actions").order_by("slug"))
    coded = _coded_destinations({destination.slug for destination in rows})
    names = [DestinationHealth.row_of(name) for name in [d.slug for d in rows] + list(coded)]
    health = {row.name: row for row in DestinationHealth.objects.filter(name__in=names)}

    def status(name: str, label: str, actions: list[str], limits: list[str]) -> DestinationStatus:
        row = health.get(DestinationHealth.row_of(name)) or DestinationHealth()
        breaker = row.breaker(now)
        return DestinationStatus(
            slug=label,
            actions=actions,
            breaker=breaker,
            failures_in_row=row.failures_in_row,
            paused_until=row.breaker_until if breaker in ("open", "probing") else None,
            limits=limits,
        )

    statuses = [
        status(d.slug, d.slug, sorted(action.name for action in d.actions.all()), limits_in_words(d)) for d in rows
    ]
    statuses += [status(name, *shown) for name, shown in coded.items()]
    return sorted(statuses, key=lambda destination: destination.slug)


def _coded_destinations(configured: set[str]) -> dict[str, tuple[str, list[str], list[str]]]:
    """The destinations coded actions call (no configured row names them): by name, what people
    read for it, its actions and its limit in words."""
    found: dict[str, tuple[str, list[str], list[str]]] = {}
    for action in sorted(registry.values(), key=lambda action: action.name):
        name = action.destination_name()
        if not action.external or name in configured:
            continue
        label, actions, _ = found.setdefault(name, (action.destination_label(), [], []))
        actions.append(action.name)
        calls = action.max_concurrency
        words = [f"at most {calls} call{'s' if calls != 1 else ''} at once"]
        if action.limits().breaker_threshold is None:
            words.append("no circuit breaker")  # as a configured destination's limits say it
        found[name] = (label, actions, words)
    return found


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
