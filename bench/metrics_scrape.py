"""Benchmark: what one scrape of /metrics costs at 1,000,000 operations.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/opsconsole make bench-scrape

PostgreSQL only. Like bench/scale.py and bench/purge.py it never touches the database in
DATABASE_URL: it creates ``scrape_<name>`` beside it (dropped first if left over), migrates it,
loads it with bench/scale.py's SQL loader and drops it at the end unless SCRAPE_KEEP=1. One
connection throughout (the scratch database is created and dropped from a short admin one).

What is loaded, besides bench/scale.py's rows (~2 % of the operations waiting for a person, a
backlog of 1,000 due, one pause switch, the rest finished; audit events at the loader's least, one
per operation, since /metrics reads none):
- ``ledger_tally`` as workers keep it (``ledger.core.tallies``): for SCRAPE_SHARDS (4) worker processes,
  attempts for every action x outcome (ok, transient, permanent, ambiguous, stale, abandoned),
  finished, finished_seconds and late per action, and the processing-time buckets per action
  (its eight bounds and +Inf): 108 rows per process, labels made by ``tallies._labels``;
- heartbeats of the sweep, the reconciler and the purge;
- one reconciliation run with SCRAPE_MISMATCHES (2,000) mismatches, 5 % of them open.

Then ``GET /metrics`` through Django's test client (DEBUG off, the bearer token), SCRAPE_WARMUP (3)
unmeasured scrapes, SCRAPE_REPEAT (50) timed ones (p50, p95), then one more under
``CaptureQueriesContext`` (queries per scrape), each of its queries run again under ``EXPLAIN
(ANALYZE, BUFFERS)``: the scans it used, the rows they read, and a flag when a scan read at least
half of a table of 10,000 rows or more (a scrape must not read the finished operations). Response
size is the body's bytes. In this order, so that one load serves two points:

1. SCRAPE_COMPARE_OPERATIONS (100,000; 0 skips) with scale.py's mix;
2. the same database grown to SCRAPE_OPERATIONS with *finished* operations only (copies of the
   finished rows, new ids and keys): the unfinished work is the same as in 1, so any difference
   is what finished operations cost a scrape;
3. SCRAPE_OPERATIONS (1,000,000) loaded afresh with scale.py's mix (its unfinished work grows with
   it: ~21,000 operations): the headline;
4. the same with the tally of SCRAPE_OLD_SHARDS (1,000; 0 skips) more shards, as the rows of
   processes that have ended: ``Tally.shard`` is host:pid and nothing folds the rows of a shard
   whose process is gone, so the table grows with every shard that ever wrote. (The pid is read
   when ``ledger.core.tallies`` is imported, which ``django.setup()`` does in the qcluster's parent
   before it forks its workers: today a shard is one cluster start, a deploy or a restart, not
   one worker; were it one worker, django-q2's ``recycle`` of 500 tasks would add one each time.)
5. SCRAPE_OPERATIONS loaded afresh with a day's backlog of SCRAPE_BACKLOG (100,000; 0 skips) due,
   as ``make bench-scale`` loads it: the scrape operators make when work piles up.

Nothing is asserted: a benchmark reports and exits 0. SCRAPE_EXPLAIN=1 also prints the full plan
of every query of the headline's scrape.
"""

import json
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
OPERATIONS = int(os.environ.get("SCRAPE_OPERATIONS", "1000000"))
COMPARE = int(os.environ.get("SCRAPE_COMPARE_OPERATIONS", "100000"))
REPEAT = int(os.environ.get("SCRAPE_REPEAT", "50"))
WARMUP = int(os.environ.get("SCRAPE_WARMUP", "3"))
SHARDS = int(os.environ.get("SCRAPE_SHARDS", "4"))
OLD_SHARDS = int(os.environ.get("SCRAPE_OLD_SHARDS", "1000"))
BACKLOG = int(os.environ.get("SCRAPE_BACKLOG", "100000"))
MISMATCHES = int(os.environ.get("SCRAPE_MISMATCHES", "2000"))
EXPLAIN = os.environ.get("SCRAPE_EXPLAIN", "") not in ("", "0")
KEEP = os.environ.get("SCRAPE_KEEP", "") not in ("", "0")
TOKEN = "bench-scrape-token"
OUTCOMES = ("ok", "transient", "permanent", "ambiguous", "stale", "abandoned")
WHOLE_TABLE_SHARE = 0.5  # a scan reading this share of a table ...
WHOLE_TABLE_ROWS = 10_000  # ... of at least this many rows is flagged


def main() -> None:
    sys.path.insert(0, str(PROJECT_DIR))
    from bench.harness import run_in_scratch_database

    run_in_scratch_database("scrape", run, keep=KEEP, extra_env={"OPSCONSOLE_METRICS_TOKEN": TOKEN})


# --- the data ---------------------------------------------------------------------------------


def load(operations: int, backlog: int = 1_000) -> None:
    """bench/scale.py's loader at this size (one audit event per operation), on an empty ledger,
    with ``backlog`` operations due (the 1,000 this bench was built around, unless told)."""

    from bench import purge, scale

    scale.OPERATIONS, scale.AUDIT_EVENTS = operations, operations
    scale.BACKLOG = backlog
    started = time.perf_counter()
    print(f"loading {operations:,} operations (bench/scale.py) ...", flush=True)
    purge.load_with_scale()
    print(f"  loaded in {time.perf_counter() - started:.0f} s", flush=True)


def empty_ledger() -> None:
    """The bulk tables emptied (and whatever refers to them: mismatches), for a fresh load."""
    from django.db import connection

    from bench.purge import TABLES

    # The audit table's trigger refuses TRUNCATE (migration 0032): the bench, as the scratch database's
    # superuser, empties it with the triggers off.
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
        cursor.execute(f"TRUNCATE {', '.join(TABLES)}, ledger_tally CASCADE")
        cursor.execute("SET session_replication_role = DEFAULT")


def add_finished(target: int) -> int:
    """Copies of the finished operations (new ids and keys) until there are ``target``: only
    finished operations are added, so the unfinished work a scrape reads stays the same."""
    from django.db import connection

    from ledger.states import TERMINAL_STATES

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*), max(id) FROM ledger_operation")
        count, top = cursor.fetchone()
        needed = target - count
        if needed <= 0:
            return 0
        cursor.execute("""SELECT column_name FROM information_schema.columns
                          WHERE table_schema = current_schema() AND table_name = 'ledger_operation'
                          ORDER BY ordinal_position""")
        columns = [row[0] for row in cursor.fetchall()]
        # The new id follows the old ones; the key gets the copy's id (unique per workspace).
        chosen = {"id": "%(top)s + n", "key": "key || ':copy-' || n"}
        select = ", ".join(chosen.get(name, f'"{name}"') for name in columns)
        cursor.execute("SET LOCAL synchronous_commit = off")
        cursor.execute(
            f"""
            INSERT INTO ledger_operation ({", ".join(f'"{name}"' for name in columns)})
            SELECT {select} FROM (
                SELECT f.*, row_number() OVER () AS n
                FROM generate_series(1, %(rounds)s) AS round,
                     LATERAL (SELECT * FROM ledger_operation WHERE state = ANY(%(terminal)s) AND id <= %(top)s) AS f
                LIMIT %(needed)s) AS copies""",
            {"top": top, "needed": needed, "terminal": sorted(TERMINAL_STATES), "rounds": needed // max(count, 1) + 2},
        )
        added = cursor.rowcount
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('ledger_operation', 'id'), (SELECT max(id) FROM ledger_operation))"
        )
        cursor.execute("VACUUM ANALYZE ledger_operation")
    print(f"  added {added:,} finished operations (copies) in {time.perf_counter() - started:.0f} s", flush=True)
    return added


def add_signals(shards: int, mismatches: int) -> None:
    """The tally of ``shards`` worker processes, the three heartbeats, a reconciliation run with
    its mismatches; then VACUUM ANALYZE of them."""
    import random

    from django.db import connection
    from django.utils import timezone

    from ledger.actions import registry
    from ledger.core import tallies
    from ledger.models import Heartbeat, Tally, Workspace

    rng = random.Random(10)
    now = timezone.now()
    rows = []
    for shard in range(shards):
        name = f"worker-{shard // 2 + 1}:{4000 + shard}"
        for action in sorted(registry):
            destination = tallies.destination(action)
            for outcome in OUTCOMES:
                rows.append(
                    Tally(
                        name=tallies.ATTEMPTS,
                        shard=name,
                        value=rng.randint(1, 50_000) if outcome == "ok" else rng.randint(0, 500),
                        labels=tallies._labels(action=action, destination=destination, outcome=outcome),
                    )
                )
            label = tallies._labels(action=action)
            finished = 0
            for bound in [*tallies.buckets(action), float("inf")]:
                n = rng.randint(0, 20_000)
                finished += n
                rows.append(
                    Tally(
                        name=tallies.FINISHED_BUCKET,
                        shard=name,
                        value=n,
                        labels=tallies._labels(action=action, le=bound),
                    )
                )
            rows += [
                Tally(name=tallies.FINISHED, shard=name, labels=label, value=finished),
                Tally(name=tallies.FINISHED_SECONDS, shard=name, labels=label, value=finished * 42.5),
                Tally(name=tallies.LATE, shard=name, labels=label, value=finished // 20),
            ]
    Tally.objects.bulk_create(rows, batch_size=2000)
    for job in ("sweep", "reconcile", "purge"):
        Heartbeat.objects.update_or_create(name=job, defaults={"beat_at": now - timedelta(minutes=1), "detail": {}})
    tables = ["ledger_tally", "ledger_heartbeat"]
    try:
        from reconciliation.models import Mismatch, MismatchKind, MismatchStatus, ReconciliationRun
    except ImportError:
        Mismatch = None
    if Mismatch is not None and mismatches:
        run = ReconciliationRun.objects.create(
            started_at=now - timedelta(hours=1),
            since=now - timedelta(days=1),
            until=now - timedelta(hours=1),
            finished_at=now,
            status=ReconciliationRun.Status.SUCCEEDED,
        )
        workspace = Workspace.objects.order_by("pk").first()
        kinds = list(MismatchKind.values)
        Mismatch.objects.bulk_create(
            [
                Mismatch(
                    run=run,
                    workspace=workspace,
                    action="file-ticket",
                    reference=f"acme:R-{i}:v1:file-ticket",
                    record_id=f"rec-{i}",
                    kind=kinds[i % len(kinds)],
                    evidence={"seen": "bench"},
                    **(
                        {"status": MismatchStatus.OPEN}
                        if i % 20 == 0
                        else {"status": MismatchStatus.ACKNOWLEDGED, "decided_by": "alice", "decided_at": now}
                    ),
                )
                for i in range(mismatches)
            ],
            batch_size=2000,
        )
        tables += [Mismatch._meta.db_table, ReconciliationRun._meta.db_table]
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"VACUUM ANALYZE {table}")


def add_old_shards(count: int) -> int:
    """The same tally rows for ``count`` processes that have ended (their rows stay)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT min(shard) FROM ledger_tally")
        first = cursor.fetchone()[0]
        cursor.execute(
            """INSERT INTO ledger_tally (name, labels, shard, value)
                          SELECT name, labels, 'old-worker:' || g, value
                          FROM ledger_tally, generate_series(1, %s) AS g WHERE shard = %s""",
            [count, first],
        )
        added = cursor.rowcount
        cursor.execute("VACUUM ANALYZE ledger_tally")
    return added


# --- measuring --------------------------------------------------------------------------------


@dataclass
class Query:
    sql: str
    ms: float  # as captured in the scrape
    plan: list[str] = field(default_factory=list)  # scans: "Index Only Scan operation_state_idx: 21,034 rows"
    whole_tables: list[str] = field(default_factory=list)
    plan_ms: float = 0.0  # EXPLAIN ANALYZE's execution time
    text: str = ""


@dataclass
class Point:
    name: str
    operations: int
    unfinished: int
    tally_rows: int
    times_ms: list[float]
    status: int
    size: int
    queries: list[Query]

    @property
    def p50(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def p95(self) -> float:
        ordered = sorted(self.times_ms)
        return ordered[max(0, round(0.95 * len(ordered)) - 1)]


def measure(name: str) -> Point:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from ledger.models import Operation, Tally
    from ledger.states import TERMINAL_STATES

    client = Client(HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    for _ in range(WARMUP):
        client.get("/metrics")
    times = []
    for _ in range(REPEAT):
        started = time.perf_counter()
        client.get("/metrics")
        times.append((time.perf_counter() - started) * 1000)
    with CaptureQueriesContext(connection) as captured:
        response = client.get("/metrics")
    queries = [Query(q["sql"], float(q["time"]) * 1000) for q in captured.captured_queries]
    sort_off = False  # between read_in_index_order's two SETs (ledger.core.selectors)
    for query in queries:
        if query.sql.startswith("SET LOCAL enable_sort"):
            sort_off = query.sql.endswith("= off")
        if query.sql.split(" ", 1)[0] not in CONTROL_STATEMENTS:
            explain(query, sort_off=sort_off)
    point = Point(
        name,
        Operation.objects.count(),
        Operation.objects.exclude(state__in=TERMINAL_STATES).count(),
        Tally.objects.count(),
        times,
        response.status_code,
        len(response.content),
        queries,
    )
    print(
        f"  {name}: HTTP {point.status}, p50 {point.p50:.1f} ms, p95 {point.p95:.1f} ms, {len(queries)} queries, "
        f"{point.size:,} bytes; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    if point.status != 200:
        print(f"    {response.content[:300]!r}")
    return point


# Statements of a scrape that plan nothing: transactions and settings (not explained).
CONTROL_STATEMENTS = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "SET")


def explain(query: Query, *, sort_off: bool = False) -> None:
    """EXPLAIN ANALYZE ``query`` as the scrape planned it (with ``enable_sort`` off when it was)."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        if sort_off:
            cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query.sql)
        result = cursor.fetchone()[0]
        document = (json.loads(result) if isinstance(result, str) else result)[0]
        query.plan_ms = document.get("Execution Time", 0.0)
        sizes: dict[str, int] = {}
        for node in _nodes(document["Plan"]):
            relation = node.get("Relation Name")
            if not relation:
                if node["Node Type"] == "Bitmap Index Scan":  # the index a Bitmap Heap Scan read
                    query.plan.append(f"(bitmap of {node['Index Name']}: {node.get('Actual Rows', 0):,})")
                continue
            if relation not in sizes:
                cursor.execute("SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE relname = %s", [relation])
                sizes[relation] = cursor.fetchone()[0]
            read = (
                node.get("Actual Rows", 0)
                + node.get("Rows Removed by Filter", 0)
                + node.get("Rows Removed by Index Recheck", 0)
            ) * node.get("Actual Loops", 1)
            index = f" {node['Index Name']}" if node.get("Index Name") else ""
            query.plan.append(f"{node['Node Type']}{index} on {relation}: {read:,} of ~{sizes[relation]:,} rows")
            if sizes[relation] >= WHOLE_TABLE_ROWS and read >= WHOLE_TABLE_SHARE * sizes[relation]:
                query.whole_tables.append(relation)
        if EXPLAIN:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + query.sql)
            query.text = "\n".join(row[0] for row in cursor.fetchall())


def _nodes(node):
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def _shape(sql: str) -> str:
    """A query in a few words: its tables and what it filters on."""
    tables = list(dict.fromkeys(re.findall(r'(?:FROM|JOIN) "(\w+)"', sql)))
    if not tables:  # BEGIN, SET .., COMMIT
        return sql[:60]
    where = re.search(r"\bWHERE (.*?)(?: GROUP BY| ORDER BY| LIMIT|$)", sql, re.S)
    condition = re.sub(r'"\w+"\.', "", where.group(1)) if where else ""
    condition = re.sub(r"'(\d{4}-\d\d-\d\d)[^']*'", r"'\1..'", condition).replace('"', "")
    group = " GROUP BY" if " GROUP BY " in sql else " UNION ALL" if " UNION ALL " in sql else ""
    return f"{' + '.join(tables)}{group}" + (
        f" WHERE {condition[:110]}{'..' if len(condition) > 110 else ''}" if condition else ""
    )


# --- the run ----------------------------------------------------------------------------------


def run(database_label: str) -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("SHOW shared_buffers")
        shared_buffers = cursor.fetchone()[0]
        cursor.execute("SHOW work_mem")
        work_mem = cursor.fetchone()[0]
    print(
        f"database: {database_label}; shared_buffers {shared_buffers}, work_mem {work_mem}; {REPEAT} timed scrapes "
        f"after {WARMUP} warm-up per point; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    points = []
    if COMPARE:
        load(COMPARE)
        add_signals(SHARDS, MISMATCHES)
        points.append(measure(f"{COMPARE:,}, scale.py's mix"))
        if OPERATIONS > COMPARE:
            add_finished(OPERATIONS)
            points.append(measure(f"{OPERATIONS:,} = the {COMPARE:,} + finished copies"))
        empty_ledger()
    load(OPERATIONS)
    add_signals(SHARDS, MISMATCHES)
    headline = measure(f"{OPERATIONS:,}, scale.py's mix")
    points.append(headline)
    if OLD_SHARDS:
        added = add_old_shards(OLD_SHARDS)
        print(f"  added {added:,} tally rows of {OLD_SHARDS:,} ended processes", flush=True)
        points.append(measure(f"{OPERATIONS:,}, tally of {SHARDS + OLD_SHARDS:,} processes"))
    if BACKLOG:
        empty_ledger()
        load(OPERATIONS, backlog=BACKLOG)
        add_signals(SHARDS, MISMATCHES)
        points.append(measure(f"{OPERATIONS:,}, a day's backlog of {BACKLOG:,} due"))
    report(points, headline)


def report(points: list[Point], headline: Point) -> None:
    print("\n| database | operations | unfinished | tally rows | HTTP | ms p50 | ms p95 | queries | SQL ms | bytes |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for p in points:
        print(
            f"| {p.name} | {p.operations:,} | {p.unfinished:,} | {p.tally_rows:,} | {p.status} | {p.p50:.1f} | "
            f"{p.p95:.1f} | {len(p.queries)} | {sum(q.plan_ms for q in p.queries):.1f} | {p.size:,} |"
        )
    for point in points:
        print(
            f"\nQueries of one scrape, {point.name} (ms as captured / EXPLAIN ANALYZE execution; scans and rows "
            "read):\n"
        )
        print("| # | query | ms | plan (rows read of the table's) | reads a whole table |")
        print("|---|---|---|---|---|")
        for i, query in enumerate(point.queries, 1):
            print(
                f"| {i} | `{_shape(query.sql)}` | {query.ms:.1f} / {query.plan_ms:.1f} | "
                f"{'; '.join(query.plan) or '-'} | {', '.join(query.whole_tables) or '-'} |"
            )
    flagged = [(p, q) for p in points for q in p.queries if q.whole_tables]
    print(
        f"\n{len(flagged)} queries read a whole table (at least {WHOLE_TABLE_SHARE:.0%} of one of "
        f"{WHOLE_TABLE_ROWS:,} rows or more)" + (":" if flagged else ".")
    )
    for point, query in flagged:
        print(f"  {point.name}: {', '.join(query.whole_tables)}: {query.sql[:300]}")
    if EXPLAIN:
        print(f"\nPlans of the scrape at {headline.name}:")
        for i, query in enumerate(headline.queries, 1):
            print(f"\n{i}. {query.sql}\n" + re.sub(r"^", "    ", query.text, flags=re.M))


if __name__ == "__main__":
    main()
