"""The dashboard's figures (the console's /console/dashboard/): what waits now, and what the last
24 hours did, for the workspaces a person may see.

What waits now is read live, each unfinished state through an index on it and counted up to
``COUNT_CAP`` (the backlog is small next to the finished rows, but may not be). What the hours did
comes from two places, each figure saying which:

- The last hour is counted live, at view time, from the audit trail's partial index on the events
  it counts (``audit_flow_time_idx``): from the start of the current hour (or the end of what the
  sweep sampled, if earlier) to now, never more than ``LIVE`` back. At most the newest
  ``COUNT_CAP + 1`` events are read; more than that, and the live figures cover the time those
  events span and say so. An incident shows on the next refresh, not at the next sample.
- The older hours are never counted at view time (at a million operations that reads too much).
  The sweep (``ledger.sweep``) samples them instead, every ``EVERY``:

  - ``FlowSample``: per workspace and action, the attempts that ended and those that failed
    (audit events out of ``processing``: to ``succeeded`` is a success, anything else a failure)
    and the operations that reached each final state, over the interval since the last sample,
    cut at hour boundaries so each row lies in one hour;
  - ``BacklogSample``: per workspace, the unfinished operations at the sample's time.

  Only the samples that end before the live part starts are read (each lies wholly on one side:
  the live part starts at an hour boundary or at the end of the last sample), so nothing is
  counted twice.

Both are insert-only, read by hour (an index on the time), and the purge forgets them after
``KEEP``. The interval ends ``SETTLE`` before now, so an event whose transaction is still
committing is not missed. The first sample (or one after the sweep stood still) counts the
whole window from the audit trail, ``CATCH_UP`` hours per sweep at most.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connections, transaction
from django.db.models import Count, Q, Sum
from django.utils import timezone

from ledger.actions import registry
from ledger.core import roles
from ledger.core.selectors import COUNT_CAP, capped_count, held_operations, oldest_due_seconds, oldest_held_seconds
from ledger.models import AuditEvent, BacklogSample, Control, FlowSample, Heartbeat, Operation, Workspace
from ledger.models.audit import FLOW_EVENTS
from ledger.reads import replica
from ledger.states import TERMINAL_STATES, UNFINISHED_STATES, State

HOURS = 24
EVERY = timedelta(minutes=5)
SETTLE = timedelta(seconds=5)
CATCH_UP = 6  # hourly intervals counted from the audit trail in one sweep at most
KEEP = timedelta(days=2)
HEARTBEAT = "dashboard"  # its beat_at: the end of the last sampled interval
SAMPLES = (FlowSample, BacklogSample)
LIVE = timedelta(hours=1)  # counted live at most this far back (the sweep stood still: a gap, said so)

FINISHED_STATES = [state for state in State if state in TERMINAL_STATES]


def destination_read(action_name: str) -> str:
    """An action's destination as the dashboard's rates name it: as every page does
    (``destination_label``), "internal" for an action that calls none."""
    action = registry.get(action_name)
    if action is None:
        return "unknown"
    return action.destination_label() if action.external else "internal"


def hour_of(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def window_start(now: datetime) -> datetime:
    """The start of the dashboard's window: the current hour and the ``HOURS - 1`` before it."""
    return hour_of(now) - timedelta(hours=HOURS - 1)


# --- sampling (the sweep) ---------------------------------------------------------------------------


def take_samples(*, now: datetime | None = None, catch_up: int = CATCH_UP) -> datetime | None:
    """Sample what happened since the last sample, if ``EVERY`` has passed; returns the end of the
    sampled interval (None: too soon).

    Locks the dashboard's heartbeat row for the whole sample, so two sweeps that overlap never
    count an interval twice; its ``beat_at`` is the end of what has been counted. Backlog is
    sampled only once the flows are caught up to now (a backlog can only be seen live).
    """
    now = now or timezone.now()
    until = now - SETTLE
    earliest = window_start(until)
    with transaction.atomic():
        mark, _ = Heartbeat.objects.select_for_update().get_or_create(name=HEARTBEAT, defaults={"beat_at": earliest})
        since = max(mark.beat_at, earliest)
        if until - since < EVERY:
            return None
        for _ in range(catch_up):
            end = min(until, hour_of(since) + timedelta(hours=1))
            _sample_flows(since, end)
            since = end
            if since >= until:
                _sample_backlog(until)
                break
        mark.beat_at = since
        mark.save(update_fields=["beat_at"])
    return since


def _flow_counts() -> dict:
    """What a sample (and the live hour) counts of the audit events in ``FLOW_EVENTS``."""
    out_of_processing = Q(from_state=State.PROCESSING)
    counts = {
        "attempts": Count("pk", filter=out_of_processing),
        "failures": Count("pk", filter=out_of_processing & ~Q(to_state=State.SUCCEEDED)),
    }
    return counts | {state.value: Count("pk", filter=Q(to_state=state)) for state in FINISHED_STATES}


def _sample_flows(since: datetime, until: datetime) -> None:
    counts = _flow_counts()
    rows = (
        AuditEvent.objects.filter(FLOW_EVENTS, created_at__gte=since, created_at__lt=until, workspace_id__isnull=False)
        .values("workspace_id", "operation__action")
        .annotate(**counts)
        .order_by()
    )
    hour = hour_of(since)
    FlowSample.objects.bulk_create(
        [
            FlowSample(
                workspace_id=row["workspace_id"],
                action=row["operation__action"] or "",
                hour=hour,
                since=since,
                until=until,
                **{name: row[name] for name in counts},
            )
            for row in rows
        ]
    )


def _sample_backlog(at: datetime) -> None:
    unfinished = dict(
        Operation.objects.filter(state__in=UNFINISHED_STATES)
        .values("workspace_id")
        .annotate(n=Count("pk"))
        .order_by()
        .values_list("workspace_id", "n")
    )
    BacklogSample.objects.bulk_create(
        [
            BacklogSample(workspace_id=workspace_id, at=at, unfinished=unfinished.get(workspace_id, 0))
            for workspace_id in Workspace.objects.values_list("pk", flat=True)
        ]
    )


def forget_samples(*, before: datetime) -> int:
    """Delete the samples older than ``before`` (the purge's); returns the rows deleted."""
    flows, _ = FlowSample.objects.filter(hour__lt=hour_of(before)).delete()
    backlog, _ = BacklogSample.objects.filter(at__lt=before).delete()
    return flows + backlog


# --- reading (the console) --------------------------------------------------------------------------


@dataclass
class StateCount:
    state: str
    count: int
    capped: bool = False  # more than COUNT_CAP (or, a final state, more than the live part could read)
    finished: bool = False  # a final state: counted over the window, not now
    live: int = 0  # a final state: of ``count``, those counted live (since ``Live.since``)


@dataclass
class Hour:
    start: datetime
    finished: int = 0
    attempts: int = 0
    failures: int = 0
    backlog: int | None = None  # None: not sampled in that hour
    sampled: bool = False  # some of its figures are the sweep's samples
    live: bool = False  # some of its figures were counted live


@dataclass
class Rate:
    name: str
    attempts: int = 0
    failures: int = 0

    @property
    def percent(self) -> float:
        return 100.0 * self.failures / self.attempts if self.attempts else 0.0


@dataclass
class Live:
    """What was counted live, at view time, over ``[counted_from, now)``."""

    since: datetime  # where the live part starts (the samples end there)
    counted_from: datetime  # = since, unless capped: the oldest event read
    capped: bool = False  # more than COUNT_CAP events since ``since``: only the newest were read
    finished: int = 0
    attempts: int = 0
    failures: int = 0
    finished_by_state: dict[str, int] = field(default_factory=dict)


@dataclass
class Figures:
    now: datetime
    since: datetime  # the window's start
    sampled_until: datetime | None  # the end of what the sweep has counted
    states: list[StateCount]
    held: int | None  # None: nothing is paused
    hours: list[Hour]
    by_action: list[Rate]
    by_destination: list[Rate]
    oldest_due_seconds: float | None
    oldest_held_seconds: float | None
    live: Live
    database: str = "default"  # where they were read (ledger.reads.replica)

    @property
    def finished(self) -> int:
        return sum(hour.finished for hour in self.hours)

    @property
    def attempts(self) -> int:
        return sum(hour.attempts for hour in self.hours)

    @property
    def failures(self) -> int:
        return sum(hour.failures for hour in self.hours)

    @property
    def backlog_now(self) -> int:
        return sum(count.count for count in self.states if not count.finished)

    @property
    def backlog_capped(self) -> bool:
        """Some unfinished state has more than COUNT_CAP: ``backlog_now`` is a lower bound."""
        return any(count.capped for count in self.states if not count.finished)

    @property
    def sampled_gap(self) -> bool:
        """The sweep has not sampled up to where the live part starts: the time between is not counted."""
        return self.sampled_until is None or self.sampled_until < self.live.since


def live_start(now: datetime, sampled_until: datetime | None) -> datetime:
    """Where the live part of the window starts: the current hour, or the end of what the sweep has
    sampled if that is earlier, but not more than ``LIVE`` ago. Either way at a boundary of the
    samples (they are cut at the hours and end where the sweep stopped), so a sample lies wholly
    before or wholly after it."""
    start = min(hour_of(now), sampled_until or window_start(now))
    return max(start, now - LIVE)


def figures(user, *, now: datetime | None = None) -> Figures:
    """The dashboard's figures over the workspaces ``user`` may see. A fixed number of queries:
    one per unfinished state, the pause switches (and, one being on, what they hold), the oldest
    due and held work, the sampling heartbeat, the live last hour, the sampled flows and backlog.

    Read from the replica when there is one (it only shows them), the heartbeat and the samples it
    stands for from the same one; the oldest due and held work, which the claim's own selectors
    compute, from the primary."""
    now = now or timezone.now()
    since = window_start(now)
    ids = roles.workspace_ids(user)
    database = replica.for_lists()
    operations = roles.visible(Operation.objects.using(database), user)
    states = {}
    for state in UNFINISHED_STATES:
        count = capped_count(operations.filter(state=state))
        states[state] = StateCount(state, min(count, COUNT_CAP), capped=count > COUNT_CAP)
    switches = list(Control.objects.using(database).filter(paused=True))
    held = capped_count(roles.visible(held_operations(switches).using(database), user)) if switches else None
    sampled_until = Heartbeat.objects.using(database).filter(name=HEARTBEAT).values_list("beat_at", flat=True).first()
    live = Live(since=live_start(now, sampled_until), counted_from=live_start(now, sampled_until))

    hours = {since + timedelta(hours=n): Hour(since + timedelta(hours=n)) for n in range(HOURS)}
    finished = dict.fromkeys(FINISHED_STATES, 0)
    by_action: dict[str, Rate] = {}
    by_destination: dict[str, Rate] = {}

    def add(row: dict, hour: Hour) -> None:
        hour.attempts += row["attempts"]
        hour.failures += row["failures"]
        for state in FINISHED_STATES:
            hour.finished += row[state.value]
            finished[state] += row[state.value]
        name = row["action"] or "unknown"
        for rates, key in ((by_action, name), (by_destination, destination_read(row["action"] or ""))):
            rate = rates.setdefault(key, Rate(key))
            rate.attempts += row["attempts"]
            rate.failures += row["failures"]

    for row in _sampled_flows(user, since, live.since).using(database):
        if (hour := hours.get(row["hour"])) is not None:  # None: an hour ahead of now (a clock set back)
            hour.sampled = True
            add(row, hour)
    for row in _live_flows(live, ids, now, database=database):
        if (hour := hours.get(row["hour"])) is not None:
            hour.live = True
            add(row, hour)
            live.attempts += row["attempts"]
            live.failures += row["failures"]
            for state in FINISHED_STATES:
                live.finished += row[state.value]
                live.finished_by_state[state] = live.finished_by_state.get(state, 0) + row[state.value]
    for hour in hours.values():  # an hour with nothing in it is still counted by whichever covers it
        hour.sampled = hour.sampled or hour.start < live.since
        hour.live = hour.live or hour.start + timedelta(hours=1) > live.since
    for state in FINISHED_STATES:
        states[state] = StateCount(
            state, finished[state], capped=live.capped, finished=True, live=live.finished_by_state.get(state, 0)
        )

    # The last backlog sample of each hour (every workspace is sampled at the same moment); the
    # current hour's point is the backlog now.
    backlog = (
        roles.visible(BacklogSample.objects.using(database).filter(at__gte=since), user)
        .values("at")
        .annotate(unfinished=Sum("unfinished"))
        .order_by("at")
    )
    for row in backlog:
        if (hour := hours.get(hour_of(row["at"]))) is not None:
            hour.backlog = row["unfinished"]
    figures = Figures(
        now=now,
        since=since,
        sampled_until=sampled_until,
        states=[states[state] for state in State],
        held=held,
        hours=list(hours.values()),
        by_action=sorted(by_action.values(), key=lambda rate: rate.name),
        by_destination=sorted(by_destination.values(), key=lambda rate: rate.name),
        oldest_due_seconds=oldest_due_seconds(now, switches, workspace_ids=ids),
        oldest_held_seconds=oldest_held_seconds(now, switches, workspace_ids=ids) if switches else None,
        live=live,
        database=database,
    )
    figures.hours[-1].backlog = figures.backlog_now
    return figures


def _sampled_flows(user, since: datetime, until: datetime):
    """The samples of ``[since, until)``, summed per hour and action."""
    return (
        roles.visible(FlowSample.objects.filter(hour__gte=since, until__lte=until), user)
        .values("hour", "action")
        .annotate(
            attempts=Sum("attempts"),
            failures=Sum("failures"),
            **{state.value: Sum(state.value) for state in FINISHED_STATES},
        )
        .order_by()
    )


def _live_flows(live: Live, ids: set[int] | None, now: datetime, *, database: str) -> list[dict]:
    """What the sweep would sample from ``live.since`` to now, counted now, per hour and action,
    of the workspaces ``ids`` (None: all). One query: the newest ``COUNT_CAP + 1`` events of the
    range in ``audit_flow_time_idx`` (every workspace's: a member's events may be few among
    others', and a range read until enough of them turned up would not be bounded), grouped.
    Read more than ``COUNT_CAP``, the range was cut: ``live`` says from where it was counted.

    The newest events are a derived table, not ``id IN (...)``: PostgreSQL answers that with a hash
    join over the whole audit trail (560 ms at 1.2 million events, against 20 ms)."""
    newest = (
        AuditEvent.objects.filter(FLOW_EVENTS, created_at__gte=live.since, created_at__lte=now)
        .order_by("-created_at", "-id")
        .values("workspace_id", "operation_id", "from_state", "to_state", "created_at")[: COUNT_CAP + 1]
    )
    newest_sql, newest_params = newest.query.sql_with_params()
    finals = ", ".join(f"COUNT(*) FILTER (WHERE e.to_state = %s) AS {state.value}" for state in FINISHED_STATES)
    sql = (
        "SELECT e.workspace_id, date_trunc('hour', e.created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour, "
        "o.action, COUNT(*) FILTER (WHERE e.from_state = %s) AS attempts, "
        "COUNT(*) FILTER (WHERE e.from_state = %s AND e.to_state <> %s) AS failures, "
        f"{finals}, COUNT(*) AS read, MIN(e.created_at) AS oldest "
        f"FROM ({newest_sql}) AS e LEFT JOIN {Operation._meta.db_table} AS o ON o.id = e.operation_id "
        "GROUP BY 1, 2, 3"
    )
    counted = [State.PROCESSING, State.PROCESSING, State.SUCCEEDED, *FINISHED_STATES]
    with connections[database].cursor() as cursor:
        cursor.execute(sql, [str(state) for state in counted] + list(newest_params))
        names = [column.name for column in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    if sum(row["read"] for row in rows) > COUNT_CAP:
        live.capped = True
        live.counted_from = min(row["oldest"] for row in rows)
    return [row for row in rows if row["workspace_id"] is not None and (ids is None or row["workspace_id"] in ids)]
