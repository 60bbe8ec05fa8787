"""Benchmark: purging 1,000,000 finished operations, and what VACUUM gives back.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/opsconsole make bench-purge

PostgreSQL only. Like bench/scale.py it never touches the database in DATABASE_URL: it creates
``purge_<name>`` beside it (dropped first if left over), migrates it, loads it with bench/scale.py's
SQL loader (``generate_series``), and drops it at the end unless PURGE_KEEP=1.

What is loaded: scale.py's rows (three workspaces, one accepted delivery per operation plus
duplicates, conflicting and invalid ones, attempts, conflicts, review drafts, contributions,
approvals, audit events), then made what a purge selects: the few unfinished operations are
finished (succeeded) and the open conflicts dismissed, so every operation is finished, unredacted,
without an open conflict, and older than both windows (they finished within the last year; the
purges below run as of a time past the windows of the newest). That fix-up touches ~3 % of the
operations; VACUUM ANALYZE follows, as autovacuum would have (it is off on this machine).

Then, with the project's own ``ledger.retention.purge``:
1. **redaction**: with the key window set to the longest (``policies.set_policy`` for every action
   in every workspace, so nothing is deleted yet), ``purge(as_of=<newest + payload window>,
   vacuum=False)`` redacts every payload; then the tables' statistics (dead tuples) and sizes, the
   purge's own ``VACUUM (ANALYZE)`` of its four tables timed separately, and the sizes after it;
2. **deletion**: the key window back to the definitions', ``purge(as_of=<newest + key window>,
   vacuum=False)`` deletes every tombstone with its rows (and the refused deliveries); sizes, dead
   tuples, the same VACUUM, sizes again; then ``VACUUM FULL`` of the same tables, to show what plain
   VACUUM made reusable inside the files against what it gave back to the file system.
3. **chunk sizes and queries** (PURGE_COMPARE_OPERATIONS, 100,000; 0 skips): the bulk tables are
   emptied and loaded again with that many operations, which are purged in slices along time: the
   oldest 5,000 with Django's query log on (queries per chunk, and one chunk's statements with the
   time each took, against the chunk's whole time: the rest is Python), then half the rest with
   chunks of 1,000 and the other half with chunks of 5,000, each slice redacted and then deleted.

Rates are rows per second of the whole ``purge()`` call (it walks every workspace and both steps);
the steady per-chunk time (median between consecutive chunks) is shown beside it, and the first and
last tenth of the chunks, to show whether a chunk costs more as the purge goes on. Nothing is
asserted: a benchmark reports and exits 0.

Environment: PURGE_OPERATIONS (1000000), PURGE_AUDIT_EVENTS (as many as operations: one per
operation, the loader's least; audit events are never purged, only measured), PURGE_CHUNK (1000),
PURGE_COMPARE_OPERATIONS (100000; at least 10,000, or 0), PURGE_KEEP=1 (keep the database at the end).
"""

import inspect
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
OPERATIONS = int(os.environ.get("PURGE_OPERATIONS", "1000000"))
AUDIT_EVENTS = int(os.environ.get("PURGE_AUDIT_EVENTS", str(OPERATIONS)))
CHUNK = int(os.environ.get("PURGE_CHUNK", "1000"))
COMPARE = int(os.environ.get("PURGE_COMPARE_OPERATIONS", "100000"))
KEEP = os.environ.get("PURGE_KEEP", "") not in ("", "0")
QUERY_SLICE = 5000
MIN_COMPARE = 10_000

# What is measured: the purge's four tables (it vacuums them), the others it writes, audit events.
TABLES = [
    "ledger_operation",
    "ledger_delivery",
    "ledger_attempt",
    "ledger_conflict",
    "ledger_reviewdraft",
    "ledger_contribution",
    "ledger_approval",
    "ledger_auditevent",
]
BULK_TABLES = TABLES[:-1]
MB = 1024 * 1024


def main() -> None:
    if 0 < COMPARE < MIN_COMPARE:
        # Its slices go along time, and scale.py's loader puts its 1,000 backlog operations a day back:
        # below this, they are older than the first slice's newest, and that slice purges them all.
        sys.exit(f"PURGE_COMPARE_OPERATIONS: at least {MIN_COMPARE:,}, or 0 to skip the chunk sizes")
    sys.path.insert(0, str(PROJECT_DIR))
    from bench.harness import run_in_scratch_database

    run_in_scratch_database("purge", run, keep=KEEP)


# --- measuring --------------------------------------------------------------------------------


@dataclass
class TableState:
    total: int  # pg_total_relation_size: heap, TOAST, indexes
    heap: int  # pg_relation_size: the main fork only
    indexes: int
    live: int  # count(*)
    dead: int  # n_dead_tup
    updated: int  # n_tup_upd, since the database was created
    hot: int  # n_tup_hot_upd: of those, the heap-only updates (no index entry written)
    free_percent: float | None = None  # pgstattuple: free space inside the heap (reusable, not returned)


@dataclass
class Snapshot:
    label: str
    tables: dict[str, TableState]


@dataclass
class Phase:
    name: str
    rows: int
    seconds: float
    chunk: int
    chunk_times: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds else float("nan")

    def chunk_ms(self, part: str) -> float:
        times = self.chunk_times
        if not times:
            return float("nan")
        tenth = max(1, len(times) // 10)
        chosen = {"median": times, "first": times[:tenth], "last": times[-tenth:]}[part]
        return 1000 * (statistics.median(chosen) if part == "median" else statistics.fmean(chosen))


class ChunkClock:
    """``purge``'s ``progress``: the time between consecutive chunk lines (a workspace's summary
    line is not a chunk), and a line on the terminal every tenth of the work."""

    def __init__(self, expected: int, verb: str):
        self.expected, self.verb = expected, verb
        self.times: list[float] = []
        self.lines = 0
        self.last = time.perf_counter()
        self.done_before = 0  # rows of the workspaces finished already
        self.done = 0
        self.next_report = expected / 10

    def __call__(self, line: str) -> None:
        now = time.perf_counter()
        if f": {self.verb} " not in line or ": would" in line or "changed:" in line:
            if "changed:" in line:
                self.done_before = self.done
            return
        self.times.append(now - self.last)
        self.last = now
        self.lines += 1
        self.done = self.done_before + int(line.split(f"{self.verb} ")[1].split()[0])
        if self.done >= self.next_report:
            print(f"    {self.done:,} {self.verb} ({len(self.times)} chunks)", flush=True)
            self.next_report += self.expected / 10


def snapshot(label: str, *, tuples: bool = False) -> Snapshot:
    """Sizes and statistics of TABLES, after the statistics this backend has pending are sent
    (PostgreSQL 15 sends them at most once a second, when the backend goes idle)."""
    from django.db import connection

    _send_statistics()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            """
            SELECT c.relname, pg_total_relation_size(c.oid), pg_relation_size(c.oid), pg_indexes_size(c.oid),
                   s.n_live_tup, s.n_dead_tup, s.n_tup_upd, s.n_tup_hot_upd
            FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
            WHERE c.relname = ANY(%s)""",
            [TABLES],
        )
        tables = {row[0]: TableState(*row[1:]) for row in cursor.fetchall()}
        for name, table in tables.items():
            # n_live_tup is an estimate (and a load's inserts, sent after its VACUUM, count twice).
            cursor.execute(f"SELECT count(*) FROM {name}")
            table.live = cursor.fetchone()[0]
        if tuples and _pgstattuple(cursor):
            for name in BULK_TABLES:
                cursor.execute("SELECT free_percent FROM pgstattuple(%s::regclass)", [name])
                tables[name].free_percent = cursor.fetchone()[0]
    return Snapshot(label, tables)


def _send_statistics() -> None:
    """Have this backend send its pending table statistics: it does when it goes idle, at most once
    a second (PostgreSQL 15)."""
    from django.db import connection

    time.sleep(1.1)
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _pgstattuple(cursor) -> bool:
    from django.db import DatabaseError

    try:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        return True
    except DatabaseError as error:  # not installed, or not allowed: the column stays empty
        print(f"  (no pgstattuple: {error})")
        return False


def timed_vacuum(full: bool = False) -> float:
    """The purge's own VACUUM (ANALYZE) of its tables (ledger.retention.written_tables), or VACUUM FULL of
    every table it writes."""
    from django.db import connection

    from ledger.retention import written_tables

    statement = f"VACUUM FULL {', '.join(BULK_TABLES)}" if full else f"VACUUM (ANALYZE) {', '.join(written_tables())}"
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(statement)
    return time.perf_counter() - started


def timed_purge(name: str, *, as_of, chunk: int, expected: int, verb: str, counted: str) -> Phase:
    from ledger.retention import purge

    clock = ChunkClock(expected, verb)
    started = time.perf_counter()
    report = purge(as_of=as_of, chunk=chunk, vacuum=False, progress=clock, actor="bench-purge")
    seconds = time.perf_counter() - started
    phase = Phase(name, report.total(counted), seconds, chunk, clock.times[1:] if len(clock.times) > 1 else [])
    others = {
        key: report.total(key)
        for key in ("redacted", "deleted", "refused_deliveries", "kept_for_occurred_at", "skipped_chunks")
        if key != counted and report.total(key)
    }
    print(
        f"  {name}: {phase.rows:,} rows in {seconds:.1f} s = {phase.rate:,.0f} rows/s; chunk of {chunk}: "
        f"median {phase.chunk_ms('median'):.0f} ms, first tenth {phase.chunk_ms('first'):.0f} ms, last tenth "
        f"{phase.chunk_ms('last'):.0f} ms" + (f"; also {others}" if others else ""),
        flush=True,
    )
    return phase


# --- the data ---------------------------------------------------------------------------------


def load(operations: int) -> None:
    """bench/scale.py's loader, at this size, then the fix-up that makes every operation due."""
    from django.db import DatabaseError, connection

    from bench import scale

    scale.OPERATIONS = operations
    scale.BACKLOG = 1_000  # as this bench was built (scale.py's default is now 100,000)
    scale.AUDIT_EVENTS = max(AUDIT_EVENTS if operations == OPERATIONS else operations, operations)
    started = time.perf_counter()
    print(f"loading {operations:,} operations and {scale.AUDIT_EVENTS:,} audit events (bench/scale.py) ...", flush=True)
    if filled := load_with_scale():
        print(f"  (columns bench/scale.py's loader does not name, given '' while it loaded: {', '.join(filled)})")
    with connection.cursor() as cursor:
        # Finished as succeeded, at their creation + 20 s as the others (updated_at then follows id).
        cursor.execute("""
            UPDATE ledger_operation SET state = 'succeeded', next_attempt_at = NULL, last_error_category = '',
                   last_error_message = '', result = jsonb_build_object('record', 'rec-' || id),
                   updated_at = created_at + interval '20 seconds'
            WHERE state NOT IN ('succeeded', 'rejected', 'cancelled', 'superseded')""")
        fixed = cursor.rowcount
        cursor.execute("""
            UPDATE ledger_conflict SET status = 'dismissed', decided_by = 'alice',
                   decided_at = created_at + interval '30 minutes'
            WHERE status = 'open'""")
        dismissed = cursor.rowcount
    _send_statistics()  # before the VACUUM, which counts the dead rows itself: else they are counted twice
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE ledger_operation, ledger_conflict")
        try:
            cursor.execute("CHECKPOINT")  # the load's writes reach the disk now, not during the purge
        except DatabaseError:
            print("  (no CHECKPOINT: not a superuser; the checkpointer writes the load meanwhile)")
    print(
        f"  finished {fixed:,} unfinished operations, dismissed {dismissed:,} open conflicts; "
        f"loaded in {time.perf_counter() - started:.0f} s",
        flush=True,
    )


def load_with_scale() -> list[str]:
    """bench/scale.py's loader (``scale.prepare``, at the sizes set on ``scale``), the text columns it
    does not name given '' while it loads (``_defaults_for_the_loader``); those columns."""
    from django.db import connection

    from bench import scale

    with connection.cursor() as cursor:
        filled = _defaults_for_the_loader(cursor, set_them=True)
    try:
        scale.prepare()
    finally:
        with connection.cursor() as cursor:
            _defaults_for_the_loader(cursor, set_them=False, columns=filled)
    return filled


def _defaults_for_the_loader(cursor, *, set_them: bool, columns: list[str] | None = None) -> list[str]:
    """Text columns that must not be NULL, have no default (Django sets them) and that scale.py's
    loader does not name (added since): given '' while it loads, so that its SQL still fits."""
    if columns is None:
        cursor.execute(
            """
            SELECT table_name || '.' || column_name FROM information_schema.columns
            WHERE table_schema = current_schema() AND table_name = ANY(%s) AND is_nullable = 'NO'
              AND column_default IS NULL AND data_type IN ('text', 'character varying') ORDER BY 1""",
            [TABLES],
        )
        from bench import scale

        named = {
            f"{table}.{column}"
            for table, names in re.findall(r"INSERT INTO (\w+) \((.*?)\)", inspect.getsource(scale.load), re.S)
            for column in re.findall(r"\w+", names)
        }
        columns = [row[0] for row in cursor.fetchall() if row[0] not in named]
    for column in columns:
        table, name = column.split(".")
        change = "SET DEFAULT ''" if set_them else "DROP DEFAULT"
        cursor.execute(f'ALTER TABLE {table} ALTER COLUMN "{name}" {change}')
    return columns


def due_counts() -> dict[str, int]:
    """What a purge will find: every operation finished, unredacted, without an open conflict."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("""
            SELECT count(*), count(*) FILTER (WHERE state IN ('succeeded', 'rejected', 'cancelled', 'superseded')
                                                 AND redacted_at IS NULL
                                                 AND NOT EXISTS (SELECT 1 FROM ledger_conflict c
                                                                 WHERE c.operation_id = o.id AND c.status = 'open')),
                   (SELECT count(*) FROM ledger_delivery WHERE operation_id IS NULL)
            FROM ledger_operation o""")
        total, due, refused = cursor.fetchone()
    return {"operations": total, "due": due, "refused": refused}


def newest_finish(up_to_id: int | None = None):
    from django.db.models import Max

    from ledger.models import Operation

    rows = Operation.objects.all() if up_to_id is None else Operation.objects.filter(pk__lte=up_to_id)
    return rows.aggregate(newest=Max("updated_at"))["newest"]


def windows() -> tuple[timedelta, timedelta]:
    """The longest payload and key windows of any action in any workspace (the definitions')."""
    from ledger.actions import registry
    from ledger.core import policies
    from ledger.models import Workspace

    effective = [
        policies.policy_for(ws, name) for ws in Workspace.objects.values_list("pk", flat=True) for name in registry
    ]
    return max(p.payload_retention for p in effective), max(p.key_retention for p in effective)


def hold_keys(hold: bool) -> None:
    """The key window of every action in every workspace: the longest (nothing is deleted), or the
    definitions' again."""
    from ledger.actions import registry
    from ledger.core import policies

    for name in registry:
        policies.set_policy(
            workspace=None,
            action=name,
            actor="bench-purge",
            key_retention=policies.LONGEST if hold else policies.INHERIT,
        )


# --- the run ----------------------------------------------------------------------------------


def run(database_label: str) -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        autovacuum = cursor.fetchone()[0]
        cursor.execute("SHOW shared_buffers")
        shared_buffers = cursor.fetchone()[0]
    print(
        f"database: {database_label}; autovacuum {autovacuum}, shared_buffers {shared_buffers}; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    load(OPERATIONS)
    due = due_counts()
    print(
        f"  {due['operations']:,} operations, {due['due']:,} of them finished, unredacted, without an open "
        f"conflict; {due['refused']:,} refused deliveries",
        flush=True,
    )
    payload_window, key_window = windows()
    newest = newest_finish()
    snapshots = [snapshot("before", tuples=True)]
    phases: list[Phase] = []
    vacuums: dict[str, float] = {}

    print("phase 1: redaction (key window held at the longest)", flush=True)
    hold_keys(True)
    phases.append(
        timed_purge(
            "redaction",
            as_of=newest + payload_window + timedelta(minutes=1),
            chunk=CHUNK,
            expected=due["due"],
            verb="redacted",
            counted="redacted",
        )
    )
    snapshots.append(snapshot("redacted"))
    before, after = snapshots[0].tables["ledger_operation"], snapshots[1].tables["ledger_operation"]
    print(
        f"  ledger_operation: {after.updated - before.updated:,} rows updated, {after.hot - before.hot:,} of them "
        "HOT (heap-only: no index entries written)",
        flush=True,
    )
    vacuums["VACUUM (ANALYZE) after redaction"] = timed_vacuum()
    print(f"  VACUUM (ANALYZE) of the purge's tables: {vacuums['VACUUM (ANALYZE) after redaction']:.1f} s", flush=True)
    snapshots.append(snapshot("redacted, VACUUM", tuples=True))

    print("phase 2: deletion (the definitions' key windows)", flush=True)
    hold_keys(False)
    phases.append(
        timed_purge(
            "deletion",
            as_of=newest + key_window + timedelta(minutes=1),
            chunk=CHUNK,
            expected=due["due"],
            verb="deleted",
            counted="deleted",
        )
    )
    snapshots.append(snapshot("deleted"))
    vacuums["VACUUM (ANALYZE) after deletion"] = timed_vacuum()
    print(f"  VACUUM (ANALYZE) of the purge's tables: {vacuums['VACUUM (ANALYZE) after deletion']:.1f} s", flush=True)
    snapshots.append(snapshot("deleted, VACUUM", tuples=True))
    vacuums["VACUUM FULL after deletion"] = timed_vacuum(full=True)
    print(f"  VACUUM FULL of every table written: {vacuums['VACUUM FULL after deletion']:.1f} s", flush=True)
    snapshots.append(snapshot("deleted, VACUUM FULL"))

    compare: list[Phase] = []
    queries: dict[str, list[int]] = {}
    statements: dict[str, list[str]] = {}
    if COMPARE:
        compare, queries, statements = chunk_sizes()

    print_tables(phases, vacuums, snapshots, compare, queries, statements)


def chunk_sizes() -> tuple[list[Phase], dict[str, list[int]], dict[str, list[str]]]:
    """A smaller load purged in slices along time: queries per chunk, then chunks of 1,000 and 5,000."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from ledger.retention import purge

    print(f"chunk sizes: the bulk tables emptied, {COMPARE:,} operations loaded again", flush=True)
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(BULK_TABLES)} CASCADE")
    load(COMPARE)
    payload_window, key_window = windows()
    quarter = (COMPARE - QUERY_SLICE) // 2
    slices = [
        ("queries", QUERY_SLICE, 1000),
        ("chunk 1000", QUERY_SLICE + quarter, 1000),
        ("chunk 5000", COMPARE, 5000),
    ]
    phases, queries, statements = [], {}, {}
    for step, window, verb in (("redaction", payload_window, "redacted"), ("deletion", key_window, "deleted")):
        hold_keys(step == "redaction")
        done = 0
        for name, up_to, chunk in slices:
            as_of = newest_finish(up_to) + window + timedelta(microseconds=1)
            if name == "queries":
                with CaptureQueriesContext(connection) as context:
                    marks: list[tuple[int, float]] = []

                    def mark(line, verb=verb, marks=marks, context=context):
                        if f": {verb} " in line and "changed:" not in line:
                            marks.append((len(context.captured_queries), time.perf_counter()))

                    purge(as_of=as_of, chunk=chunk, vacuum=False, progress=mark, actor="bench-purge")
                per_chunk = [b - a for (a, _), (b, _) in zip(marks, marks[1:], strict=False)]
                queries[step] = per_chunk
                if len(marks) > 1:
                    # The second chunk (the first pays for the workspace's start): each statement's
                    # time as Django saw it, and what the chunk spent outside the database.
                    (first, began), (last, ended) = marks[0], marks[1]
                    chunk_queries = context.captured_queries[first:last]
                    in_database = sum(float(q["time"]) for q in chunk_queries)
                    statements[step] = [f"{_shape(q['sql'])} {1000 * float(q['time']):.0f} ms" for q in chunk_queries]
                    statements[step].append(
                        f"= {1000 * in_database:.0f} ms in the database of a {1000 * (ended - began):.0f} ms chunk"
                    )
                print(
                    f"  {step}, {QUERY_SLICE:,} operations, chunks of {chunk}: queries per chunk {per_chunk}",
                    flush=True,
                )
            else:
                expected = up_to - done
                phases.append(
                    timed_purge(f"{step}, {name}", as_of=as_of, chunk=chunk, expected=expected, verb=verb, counted=verb)
                )
            done = up_to
        timed_vacuum()
    return phases, queries, statements


def _shape(sql: str) -> str:
    """A query's verb and table, e.g. ``UPDATE ledger_operation`` (its size, for the long ones)."""
    words = sql.replace('"', "").split()
    verb = words[0].upper()
    table = next(
        (
            words[i + 1]
            for i, w in enumerate(words[:-1])
            if w.upper() in ("FROM", "UPDATE", "INTO") and words[i + 1].startswith("ledger_")
        ),
        "",
    )
    return f"{verb} {table}".strip() + (f" ({len(sql) // 1000} kB of SQL)" if len(sql) > 10000 else "") + ":"


# --- the report -------------------------------------------------------------------------------


def print_tables(phases, vacuums, snapshots, compare, queries, statements) -> None:
    print()
    print("| phase | rows | seconds | rows/s | chunk | ms per chunk (median) | first tenth | last tenth |")
    print("|---|---|---|---|---|---|---|---|")
    for phase in phases + compare:
        print(
            f"| {phase.name} | {phase.rows:,} | {phase.seconds:.1f} | {phase.rate:,.0f} | {phase.chunk:,} | "
            f"{phase.chunk_ms('median'):.0f} | {phase.chunk_ms('first'):.0f} | {phase.chunk_ms('last'):.0f} |"
        )
    for name, seconds in vacuums.items():
        print(f"| {name} | | {seconds:.1f} | | | | | |")
    print()
    header = " | ".join(s.label for s in snapshots)
    line = "|---" * (len(snapshots) + 1) + "|"
    for title, cell in (
        ("total size, MB (pg_total_relation_size: heap + TOAST + indexes)", lambda t: f"{t.total / MB:,.1f}"),
        ("heap, MB (pg_relation_size)", lambda t: f"{t.heap / MB:,.1f}"),
        ("indexes, MB (pg_indexes_size)", lambda t: f"{t.indexes / MB:,.1f}"),
        ("dead tuples (n_dead_tup)", lambda t: f"{t.dead:,}"),
        ("rows (count(*))", lambda t: f"{t.live:,}"),
    ):
        print(f"| {title} | {header} |")
        print(line)
        for name in TABLES:
            print(f"| {name} | " + " | ".join(cell(s.tables[name]) for s in snapshots) + " |")
        if "MB" in title:
            print(
                "| **all of them** | "
                + " | ".join(
                    f"**{cell(TableState(*(sum(getattr(t, f) for t in s.tables.values()) for f in ('total', 'heap', 'indexes', 'live', 'dead', 'updated', 'hot'))))}**"  # noqa: E501
                    for s in snapshots
                )
                + " |"
            )
        print()
    measured = [s for s in snapshots if any(t.free_percent is not None for t in s.tables.values())]
    if measured:
        print(
            "| free space inside the heap (pgstattuple free_percent): reusable, not returned | "
            + " | ".join(s.label for s in measured)
            + " |"
        )
        print("|---" * (len(measured) + 1) + "|")
        for name in BULK_TABLES:
            print(f"| {name} | " + " | ".join(f"{s.tables[name].free_percent:.0f} %" for s in measured) + " |")
        print()
    for step, counts in queries.items():
        print(
            f"queries per {step} chunk of 1,000 ({QUERY_SLICE:,} operations, a workspace's last chunk also "
            f"starts the next): {counts}; one chunk: " + ", ".join(statements.get(step, []))
        )


if __name__ == "__main__":
    main()
