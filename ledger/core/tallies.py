"""Counters for /metrics that a scrape cannot afford to count: attempts by action,
destination and outcome, and finished operations by how long they took from arrival to their
final state, in buckets around each action's service level, with those that missed it.

They are added in the transaction that records what they count (an attempt's outcome, a final
state), so they commit or roll back with it: one ``INSERT .. ON CONFLICT DO UPDATE SET value =
value + n`` per batch, to this process's own rows (``Tally.shard``), which no other worker waits
for. Only the value changes and no index covers it, so the updates are HOT: the page prunes the
old versions itself. A scrape sums the shards (a small table: counters × label sets × shards).

A shard is the host and the process id modulo ``SHARDS``, taken when a row is written (django-q2
forks its workers after Django is set up, and replaces them every few hundred tasks): concurrent
processes rarely share one, and a host never has more than ``SHARDS``, however many workers
come and go.
"""

import json
import os
import socket
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from functools import lru_cache

from django.db import connection
from django.utils import timezone

from ledger.actions import registry
from ledger.models import Operation, Tally

ATTEMPTS = "attempts"
FINISHED_BUCKET = "finished_bucket"  # per bucket, not cumulative: /metrics accumulates them
FINISHED_SECONDS = "finished_seconds"
FINISHED = "finished"
LATE = "late"
# Claims by callers that perform their own effect (ledger.callers), by what they were answered;
# and leases that expired with no outcome (ledger.engine.expiry), by action.
CLAIMS = "claims"
LEASES_EXPIRED = "leases_expired"
# Buckets as shares of the action's service level (or, without one, of an hour).
BUCKET_SHARES = (0.1, 0.25, 0.5, 0.8, 1.0, 1.5, 2.0, 5.0)
NO_LEVEL = timedelta(hours=1)
SHARDS = 16


def destination(action_name: str) -> str:
    action = registry.get(action_name)
    if action is None:
        return "unknown"
    return action.destination_name() if action.external else "internal"


def count_attempts(outcomes: list[tuple[Operation, str]]) -> None:
    """One attempt per (operation, outcome) finished."""
    _add(_attempts(outcomes))


def count(name: str, n: int = 1, **labels) -> None:
    """Add ``n`` to one counter, in the caller's transaction (if any)."""
    _add(Counter({(name, _labels(**labels)): n}))


def count_finished(operations: list[Operation], now=None) -> None:
    """Operations that reached a final state now: how long since they arrived, and whether late."""
    _add(_finished(operations, now or timezone.now()))


def count_moves(
    finished: list[Operation],
    now,
    *,
    attempts: Sequence[tuple[Operation, str]] = (),
    expired: Sequence[Operation] = (),
) -> None:
    """Operations that reached a final state now, the tries their moves finished, and the leases
    that expired with them, in one statement (``ledger.core.transitions.transition_many``)."""
    leases = Counter((LEASES_EXPIRED, _labels(action=operation.action)) for operation in expired)
    _add(_attempts(attempts) + _finished(finished, now) + leases)


def count_successes(operations: list[Operation], now) -> None:
    """Operations whose attempt succeeded and that are now succeeded: both counts, one statement."""
    _add(_attempts([(operation, "ok") for operation in operations]) + _finished(operations, now))


def _attempts(outcomes) -> Counter:
    # Grouped by action first: the labels are built once per action and outcome, not per operation.
    by_action = Counter((operation.action, outcome) for operation, outcome in outcomes)
    return Counter(
        {
            (ATTEMPTS, _labels(action=action, destination=destination(action), outcome=outcome)): count
            for (action, outcome), count in by_action.items()
        }
    )


def _finished(operations, now) -> Counter:
    waits: dict[str, list[float]] = {}
    for operation in operations:
        waits.setdefault(operation.action, []).append(max((now - operation.created_at).total_seconds(), 0.0))
    counts: Counter = Counter()
    for name, seconds_each in waits.items():
        level = buckets(name)
        action = _labels(action=name)
        service_level = _service_level(name)
        counts[(FINISHED, action)] += len(seconds_each)
        for seconds in seconds_each:
            # A Counter adds floats as well (the tally is a FloatField); typeshed's holds ints only.
            counts[(FINISHED_SECONDS, action)] += seconds  # type: ignore[assignment]
            le = next((bound for bound in level if seconds <= bound), float("inf"))
            counts[(FINISHED_BUCKET, _labels(action=name, le=le))] += 1
            if service_level is not None and seconds > service_level.total_seconds():
                counts[(LATE, action)] += 1
    return counts


def buckets(action_name: str) -> list[float]:
    """The upper bounds of an action's histogram buckets, in seconds."""
    level = (_service_level(action_name) or NO_LEVEL).total_seconds()
    return [round(level * share, 3) for share in BUCKET_SHARES]


def totals() -> dict[tuple[str, str], float]:
    """Every counter summed over the shards: {(name, labels JSON): value}."""
    from django.db.models import Sum

    rows = Tally.objects.values("name", "labels").annotate(total=Sum("value")).order_by("name", "labels")
    return {(row["name"], row["labels"]): row["total"] for row in rows}


def _service_level(action_name: str):
    action = registry.get(action_name)
    return action.service_level if action is not None else None


@lru_cache(maxsize=4096)
def _labels(**values) -> str:
    return json.dumps(values, sort_keys=True, default=str)


def shard() -> str:
    """This process's rows (SQL that counts, ``ledger_claim``, is given it)."""
    return f"{socket.gethostname()}:{os.getpid() % SHARDS}"


def success_labels(action_name: str) -> dict:
    """What ``count_moves`` counts for a try of ``action_name`` that succeeded and finished its
    operation, as SQL that counts it is given it (``ledger_report_outcome``): the attempt's labels,
    the action's, each bucket's bound with its labels (then ``beyond``'s) and the service level in
    seconds (None: none)."""
    level = _service_level(action_name)
    return {
        "attempts": _labels(action=action_name, destination=destination(action_name), outcome="ok"),
        "action": _labels(action=action_name),
        "buckets": [[bound, _labels(action=action_name, le=bound)] for bound in buckets(action_name)],
        "beyond": _labels(action=action_name, le=float("inf")),
        "service_level": level.total_seconds() if level is not None else None,
    }


def labels_of(**values) -> str:
    """A counter's labels as its rows hold them (SQL that counts is given them)."""
    return _labels(**values)


def _add(counts: Counter) -> None:
    if not counts:
        return
    table = connection.ops.quote_name(Tally._meta.db_table)
    rows = ", ".join(["(%s, %s, %s, %s)"] * len(counts))
    params = [value for (name, labels), n in sorted(counts.items()) for value in (name, labels, shard(), n)]
    # Sorted, so two transactions of one process never lock its rows in opposite orders.
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (name, labels, shard, value) VALUES {rows} "
            f"ON CONFLICT (name, labels, shard) DO UPDATE SET value = {table}.value + excluded.value",
            params,
        )
