"""Benchmark: the console and the admin with 1,000,000 operations and 5,000,000 audit events (or
more: the issue's goal is 5,000,000 and 25,000,000), intake and claims on it against a small ledger,
and the purge of a month of the audit trail.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/opsconsole make bench-scale
    SCALE_OPERATIONS=5000000 SCALE_AUDIT_EVENTS=25000000 make bench-scale

Needs PostgreSQL (the sizes are the point). Like bench/drain.py it never touches the database in
DATABASE_URL: it creates ``scale_<name>`` beside it, migrates it, loads it with SQL
(``generate_series``, SCALE_CHUNK operations a transaction, progress printed), runs ``VACUUM
ANALYZE`` as autovacuum would have, and drops it at the end.

What is loaded (three workspaces of 60 %, 30 % and 10 % of the rows, created through the services):
operations that arrived over the last 13 months (~2 % needing attention, a backlog of SCALE_BACKLOG
due that arrived over the last day, within their deadlines, part of it held by a pause of one
workspace's send-notice; the rest finished), one accepted delivery each plus duplicates, conflicts
and invalid ones, one attempt per operation that ran, review drafts of the succeeded prepare-briefs,
contributions, approvals, conflicts, and SCALE_AUDIT_EVENTS / SCALE_OPERATIONS audit events per
operation in time order (a rare kind and a rare actor among them), into the audit trail's monthly
partitions (``ledger.core.audit_partitions.ensure_range``, called first). Audit hashes are filled
with hex of the right width but do not form a chain: nothing here verifies the loaded rows.

In two parts, in one run:
1. a sample of SCALE_SMALL operations (every n-th: the same 13 months, the same mix) and their
   rows, on which intake and claims are measured through a real gunicorn (bench/scale_costs.py:
   CPU of gunicorn and of PostgreSQL per event, median of interleaved rounds);
2. the rest, with the indexes that back no constraint dropped first and built again after (a
   built index is denser than a grown one: the pages are measured on compact indexes). Intake
   and claims are measured again, and each one's cost per event compared with the sample's: PASS
   when at most 1.2 times.

Then every console page and every admin changelist (with its search and filters, the first page
and a deep one) is requested through Django's test client, logged in as a superuser and as a staff
member of one workspace (their queries differ), SCALE_REPEAT times each after SCALE_WARMUP
unmeasured requests, and each page's p50, p95 and query count are printed with PASS when its p95 is
under 300 ms. Last, the purge of a month past its window (``measure_purge``): the oldest monthly
partition of the audit trail detached and dropped, its statement time (PASS under a second) and the
dead tuples it left in the audit trail, deliveries and attempts (PASS at 0); skipped, said so,
while the audit trail is not partitioned. A benchmark reports; it exits 0 either way.

Environment: SCALE_OPERATIONS (1000000), SCALE_AUDIT_EVENTS (5000000), SCALE_SMALL (100000; 0 loads
all at once and compares nothing), SCALE_BACKLOG (100000: a day's arrivals waiting, as after a long
pause or an outage of the workers), SCALE_CHUNK (500000), SCALE_REBUILD_INDEXES (1; 0 grows them as
the rows arrive), SCALE_COST_ROUNDS (7), SCALE_COST_EVENTS (400), SCALE_REPEAT (20), SCALE_WARMUP
(2), SCALE_ONLY (run only the pages whose name contains this text), SCALE_EXPLAIN=1 (print EXPLAIN
ANALYZE of each page's slowest query), SCALE_KEEP=1 (keep the loaded database and reuse it next
time: it is migrated, and loaded only when empty; scale-admin and scale-member log in with the
password below, to look around it with `manage.py runserver`).
"""

import contextlib
import functools
import logging
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
OPERATIONS = int(os.environ.get("SCALE_OPERATIONS", "1000000"))
AUDIT_EVENTS = int(os.environ.get("SCALE_AUDIT_EVENTS", "5000000"))
BACKLOG = int(os.environ.get("SCALE_BACKLOG", "100000"))
REPEAT = int(os.environ.get("SCALE_REPEAT", "20"))
WARMUP = int(os.environ.get("SCALE_WARMUP", "2"))
ONLY = os.environ.get("SCALE_ONLY", "")
EXPLAIN = os.environ.get("SCALE_EXPLAIN", "") not in ("", "0")
KEEP = os.environ.get("SCALE_KEEP", "") not in ("", "0")
BUDGET_MS = 300
SMALL = int(os.environ.get("SCALE_SMALL", "100000"))  # the ledger intake and claims are first measured on
CHUNK = int(os.environ.get("SCALE_CHUNK", "500000"))  # operations per transaction of the loader
REBUILD_INDEXES = os.environ.get("SCALE_REBUILD_INDEXES", "1") not in ("", "0")  # 0: grown as rows arrive
SPAN = timedelta(days=395)  # the 13 months the loaded operations and audit events arrived over
LOADED_TABLES = (
    "ledger_delivery",
    "ledger_operation",
    "ledger_attempt",
    "ledger_conflict",
    "ledger_reviewdraft",
    "ledger_contribution",
    "ledger_approval",
    "ledger_auditevent",
)

WORKSPACES = [("acme", 6), ("globex", 3), ("initech", 1)]  # slug, tenths of the rows
ACTIONS = [
    "prepare-brief",
    "prepare-brief",
    "file-ticket",
    "send-notice",
    "prepare-brief",
    "file-ticket",
    "prepare-brief",
    "send-notice",
    "prepare-brief",
    "issue-refund",
]
PASSWORD = "scale-bench-password"


def main() -> None:
    sys.path.insert(0, str(PROJECT_DIR))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opsconsole.settings")
    # Timed as deployed: DEBUG off (it would keep every query and render debug pages).
    os.environ.setdefault("SECRET_KEY", "bench-scale-only-not-a-secret")
    os.environ.setdefault("OPSCONSOLE_KEY_SECRET", "bench-scale-only-not-a-secret")
    os.environ.setdefault("OPSCONSOLE_AUDIT_KEY", "bench-scale-only-not-a-secret")
    os.environ["DEBUG"] = "0"
    # The claims measured go to the demo's send-invoice, whose stand-in destination is on 127.0.0.1.
    os.environ.setdefault("OPSCONSOLE_EGRESS_ALLOW_PRIVATE", "1")
    import environ

    url = os.environ.get("DATABASE_URL", "")
    if not url or environ.Env.db_url_config(url)["ENGINE"] != "django.db.backends.postgresql":
        sys.exit("bench-scale needs PostgreSQL: DATABASE_URL=postgres://user@host:port/name make bench-scale")
    from bench.drain import ScratchDatabase

    with tempfile.TemporaryDirectory(prefix="opsconsole-scale-") as scratch_dir:
        if KEEP:
            scratch = _kept_database(url)
        else:
            scratch = ScratchDatabase(url, Path(scratch_dir), prefix="scale")
        os.environ["DATABASE_URL"] = scratch.url
        try:
            run(scratch.label, Path(scratch_dir))
        finally:
            if KEEP:
                from django.db import connections

                connections.close_all()
                print(f'kept {scratch.name} (SCALE_KEEP=1); drop it with: DROP DATABASE "{scratch.name}"')
            else:
                scratch.drop()


def _kept_database(url: str):
    """The ``scale_<name>`` database beside DATABASE_URL, created if absent and otherwise kept as it is."""
    import environ
    import psycopg

    config = environ.Env.db_url_config(url)
    name = f"scale_{config['NAME']}"
    params = {
        "host": config.get("HOST") or "127.0.0.1",
        "port": config.get("PORT") or 5432,
        "user": config.get("USER") or None,
        "password": config.get("PASSWORD") or None,
    }
    with psycopg.connect(dbname="postgres", autocommit=True, **{k: v for k, v in params.items() if v}) as admin:
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            admin.execute(f'CREATE DATABASE "{name}"')

    class Kept:
        pass

    kept = Kept()
    kept.name, kept.label = name, f"PostgreSQL ({name}, kept)"
    kept.url = url.rsplit("/", 1)[0].split("?")[0] + f"/{name}"
    return kept


# --- loading -----------------------------------------------------------------------------------


def load(
    workspaces: dict[str, int], users: dict[str, int], *, part: str = "all", every: int = 1, rebuild_indexes=False
) -> None:
    """Insert the rows with SQL, in chunks of CHUNK operations (one transaction each), then VACUUM ANALYZE.

    The operations are numbered 1..OPERATIONS; ``part`` says which of them this call inserts: "all",
    "sample" (every ``every``-th: a ledger of OPERATIONS / every spread over the same 13 months, in
    the same mix) or "rest" (the others, after the sample). ``rebuild_indexes`` drops the indexes
    that back no constraint first and builds them again at the end (faster than growing them)."""
    from django.db import connection, transaction

    n = OPERATIONS
    per_operation = max(AUDIT_EVENTS // n, 1)
    ws_ids = [workspaces[slug] for slug, tenths in WORKSPACES for _ in range(tenths)]
    ws_slugs = [slug for slug, tenths in WORKSPACES for _ in range(tenths)]
    now = _anchor()
    step = SPAN / n
    params = {
        "n": n,
        "backlog": BACKLOG,
        "ws": ws_ids,
        "slugs": ws_slugs,
        "actions": ACTIONS,
        "per": per_operation,
        "first_event": _audit_ids_from(),
        "every": every,
        "member": users["scale-member"],
        "alice": users["alice"],
        # The operations arrived over the 13 months before an hour ago, one every ``step``; the
        # events of each follow it, ``step / per`` apart, so that ids follow time as appends do.
        "t0": now - timedelta(hours=1) - SPAN,
        "step": step,
        "event_step": step / per_operation,
        # The backlog arrived over the last day (after an hour of quiet, as the rest).
        "backlog_t0": now - timedelta(hours=1) - timedelta(days=1),
        "backlog_step": timedelta(days=1) / max(BACKLOG, 1),
    }
    picked = {"all": "TRUE", "sample": "i %% %(every)s = 0", "rest": "i %% %(every)s <> 0"}[part]
    with connection.cursor() as cursor:
        operation_columns = _columns(cursor, "ledger_operation")

    # Each row of the series (the operations of this chunk and part; with ``events``, each of them
    # once per audit event, numbered j), with what the other statements derive from it. The
    # workspace follows i (interleaved 6:3:1); the action and the fate follow a hash of i.
    def rows(*, events: bool = False) -> str:
        return (
            """
        WITH base AS (
            SELECT *, (%(ws)s::bigint[])[i %% 10 + 1] AS ws, (%(slugs)s::text[])[i %% 10 + 1] AS slug,
                   (%(actions)s::text[])[(i / 10) %% 10 + 1] AS action, abs(hashint4(i::int) %% 1000) AS r,
                   CASE WHEN i > %(n)s - %(backlog)s
                        THEN %(backlog_t0)s::timestamptz + (i - (%(n)s - %(backlog)s)) * %(backlog_step)s::interval
                        ELSE %(t0)s::timestamptz + i * %(step)s::interval END AS t
            FROM (SELECT i FROM generate_series(%(lo)s::int, %(hi)s::int) AS i WHERE """
            + picked
            + ") AS picked"
            + (" CROSS JOIN generate_series(0, %(per)s - 1) AS j" if events else "")
            + """
        ), s AS (
            SELECT *, slug || ':R-' || i || ':v1:' || action AS key,
                   CASE WHEN i > %(n)s - %(backlog)s THEN (CASE WHEN i %% 2 = 0 THEN 'pending' ELSE 'retrying' END)
                        WHEN r < 10 THEN 'needs_review' WHEN r < 15 THEN 'unknown'
                        WHEN r < 20 THEN 'pending_approval' WHEN r < 25 THEN 'cancelled'
                        WHEN r < 28 THEN 'rejected' ELSE 'succeeded' END AS state,
                   action <> 'prepare-brief' AS external
            FROM base
        )
        """
        )

    series = rows()
    first_delivery = "first_delivery_id" in operation_columns
    # Ordering columns (migration 0013; NOT NULL, no default): none of these versions is ordered.
    ordered = "ordered" in operation_columns
    statements = [
        (
            "operations and their first deliveries",
            [
                series
                + """
            INSERT INTO ledger_delivery (id, workspace_id, operation_id, delivery_id, correlation_id,
                                         occurred_at, source, submitted_by, person_id, action, key, outcome, errors,
                                         received_at)
            SELECT i, ws, i, 'd-' || i, CASE WHEN i %% 10 = 0 THEN 'corr-' || i ELSE '' END, t, 'api',
                   'token:oc_ab12', NULL, action, key, 'accepted', '[]', t
            FROM s""",
                series
                + f"""
            INSERT INTO ledger_operation (id, workspace_id, action, key, key_recipe, definition_version, fingerprint,
                payload, {"first_delivery_id," if first_delivery else ""} correlation_id, submitted_by, state,
                attempts, next_attempt_at, deadline, lease_owner, lease_expires_at, fencing_token,
                last_error_category, last_error_message, result, external_id, created_at, updated_at
                {", series, ordered" if ordered else ""})
            SELECT i, ws, action, key, 1, left(md5(action), 16), md5(i::text) || md5((i + 1)::text),
                   jsonb_build_object('request_id', 'R-' || i, 'version', 1, 'title', 'Review renewal options',
                                      'owner', 'ops'),
                   {"i," if first_delivery else ""} CASE WHEN i %% 10 = 0 THEN 'corr-' || i ELSE '' END,
                   'token:oc_ab12', state,
                   CASE state WHEN 'needs_review' THEN 5 WHEN 'unknown' THEN 2 WHEN 'pending' THEN 0
                              WHEN 'pending_approval' THEN 0 WHEN 'rejected' THEN 0 ELSE 1 END,
                   CASE WHEN state IN ('pending', 'retrying') THEN t
                        WHEN state = 'unknown' THEN now() + interval '10 minutes' END,
                   t + CASE WHEN state = 'pending_approval' THEN interval '7 days'
                            WHEN state IN ('pending', 'retrying') THEN interval '2 days' ELSE interval '1 day' END,
                   '', NULL, CASE WHEN state IN ('pending', 'pending_approval', 'rejected') THEN 0 ELSE 1 END,
                   CASE state WHEN 'needs_review' THEN 'permanent' WHEN 'unknown' THEN 'ambiguous'
                              WHEN 'retrying' THEN 'transient' ELSE '' END,
                   CASE state WHEN 'needs_review' THEN 'owner ' || i %% 3000 || ' does not exist'
                              WHEN 'unknown' THEN 'read timeout after 5.0 s'
                              WHEN 'retrying' THEN 'HTTP 503 from the destination' ELSE '' END,
                   CASE WHEN state = 'succeeded' THEN jsonb_build_object('record', 'rec-' || i) END,
                   CASE WHEN state = 'succeeded' AND external THEN 'rec-' || i ELSE '' END,
                   t, t + CASE WHEN state IN ('needs_review', 'unknown', 'pending_approval')
                               THEN interval '2 hours' + r * interval '1 minute' ELSE interval '20 seconds' END
                   {", '', ''" if ordered else ""}
            FROM s""",
                # Duplicates (5 %%), conflicting deliveries (0.5 %%) and invalid ones (1 %% of n).
                series
                + """
            INSERT INTO ledger_delivery (id, workspace_id, operation_id, delivery_id, correlation_id,
                                         occurred_at, source, submitted_by, person_id, action, key, outcome, errors,
                                         received_at)
            SELECT %(n)s + i, ws, i, 'd-' || i || '-again', '', t, 'api', 'token:oc_ab12', NULL::integer, action, key,
                   'duplicate', '[]'::jsonb, t + interval '1 minute'
            FROM s WHERE r BETWEEN 100 AND 149
            UNION ALL
            SELECT 3 * %(n)s + i, ws, i, 'd-' || i || '-changed', '', t, 'api', 'token:oc_ab12', NULL, action, key,
                   'conflict', '[]', t + interval '30 minutes'
            FROM s WHERE r < 5
            UNION ALL
            SELECT 2 * %(n)s + i, ws, NULL::bigint, 'd-bad-' || i, '', t, 'api', 'token:oc_ab12', NULL, action, '',
                   'invalid', '[{"field": "data.version", "message": "Input should be a valid integer"}]',
                   t + interval '5 seconds'
            FROM s WHERE i %% 100 = 7""",
            ],
        ),
        (
            "attempts, conflicts, drafts, contributions, approvals",
            [
                series
                + """
            INSERT INTO ledger_attempt (id, operation_id, number, fencing_token, worker, idempotency_key, started_at,
                                        finished_at, outcome, error_type, error_message, http_status, external_id,
                                        report)
            SELECT i, i, 1, 1, 'worker-' || (i %% 2 + 1), CASE WHEN external THEN key ELSE '' END,
                   t + interval '7 seconds', t + interval '8 seconds',
                   CASE state WHEN 'needs_review' THEN 'permanent' WHEN 'unknown' THEN 'ambiguous'
                              WHEN 'retrying' THEN 'transient' ELSE 'ok' END,
                   CASE state WHEN 'needs_review' THEN 'PermanentError' WHEN 'unknown' THEN 'AmbiguousError'
                              WHEN 'retrying' THEN 'TransientError' ELSE '' END,
                   CASE state WHEN 'needs_review' THEN 'owner does not exist'
                              WHEN 'unknown' THEN 'read timeout after 5.0 s'
                              WHEN 'retrying' THEN 'HTTP 503 from the destination' ELSE '' END,
                   CASE WHEN external THEN (CASE state WHEN 'retrying' THEN 503 WHEN 'unknown' THEN NULL
                                                       ELSE 200 END) END,
                   CASE WHEN state = 'succeeded' AND external THEN 'rec-' || i ELSE '' END, ''
            FROM s WHERE state IN ('succeeded', 'needs_review', 'unknown', 'retrying', 'cancelled')""",
                series
                + """
            INSERT INTO ledger_conflict (id, operation_id, delivery_id, incoming_fingerprint, incoming_payload,
                                         differences, status, decided_by, decided_at, created_at)
            SELECT i, i, 3 * %(n)s + i, md5('changed' || i) || md5(i::text),
                   jsonb_build_object('request_id', 'R-' || i, 'version', 1,
                                      'title', 'Review renewal options (revised)', 'owner', 'ops'),
                   '[{"field": "title", "recorded": "Review renewal options",
                      "incoming": "Review renewal options (revised)"}]',
                   CASE WHEN i %% 3 = 0 THEN 'open' ELSE 'dismissed' END,
                   CASE WHEN i %% 3 = 0 THEN '' ELSE 'alice' END,
                   CASE WHEN i %% 3 = 0 THEN NULL ELSE t + interval '1 hour' END, t + interval '30 minutes'
            FROM s WHERE r < 5""",
                series
                + """
            INSERT INTO ledger_reviewdraft (id, operation_id, workspace_id, title, owner, state, created_at)
            SELECT i, i, ws, 'Review renewal options', 'ops', 'awaiting_review', t + interval '8 seconds'
            FROM s WHERE state = 'succeeded' AND action = 'prepare-brief'""",
                series
                + """
            INSERT INTO ledger_contribution (id, operation_id, user_id, kind, created_at)
            SELECT i, i, CASE WHEN i %% 2 = 0 THEN %(member)s ELSE %(alice)s END, 'submitted', t
            FROM s WHERE r BETWEEN 200 AND 249""",
                series
                + """
            INSERT INTO ledger_approval (id, operation_id, fingerprint, decision, approver, note, decided_at)
            SELECT i, i, md5(i::text) || md5((i + 1)::text),
                   CASE WHEN state = 'rejected' THEN 'rejected' ELSE 'approved' END, 'bob',
                   CASE WHEN state = 'rejected' THEN 'amount looks wrong' ELSE '' END, t + interval '1 hour'
            FROM s WHERE action = 'issue-refund' AND state IN ('succeeded', 'rejected')""",
            ],
        ),
        (
            "audit events",
            [
                # Event j of operation i is number g of the whole series: its id (after those the
                # services wrote first), so that the sample and the rest interleave as appended.
                rows(events=True)
                + """
            INSERT INTO ledger_auditevent (id, operation_id, workspace_id, attempt_id, actor, kind, from_state,
                                           to_state, error_category, message, created_at, prev_hash, hash, hash_key)
            SELECT %(first_event)s + g, CASE WHEN paused THEN NULL ELSE i END, ws, NULL,
                   CASE WHEN paused THEN 'alice' WHEN j = 0 THEN 'token:oc_ab12'
                        ELSE 'worker-' || (i %% 2 + 1) END,
                   CASE WHEN paused THEN 'paused' WHEN j = 0 THEN 'reserved' WHEN j = last THEN
                            (CASE state WHEN 'succeeded' THEN 'succeeded' WHEN 'needs_review' THEN 'needs_review'
                                        WHEN 'unknown' THEN 'outcome_unknown' WHEN 'cancelled' THEN 'cancelled'
                                        WHEN 'rejected' THEN 'rejected'
                                        WHEN 'pending_approval' THEN 'approval_requested'
                                        ELSE 'retry_scheduled' END)
                        WHEN j %% 2 = 1 THEN 'claimed' ELSE 'retry_scheduled' END,
                   CASE WHEN paused THEN '' WHEN j = 0 THEN '' WHEN j %% 2 = 1 THEN 'pending' ELSE 'processing' END,
                   CASE WHEN paused THEN '' WHEN j = 0 THEN 'pending' WHEN j = last THEN state
                        WHEN j %% 2 = 1 THEN 'processing' ELSE 'retrying' END,
                   CASE WHEN paused OR j %% 2 = 1 OR j = 0 THEN '' WHEN j = last AND state = 'succeeded' THEN ''
                        ELSE 'transient' END,
                   CASE WHEN paused THEN 'destination maintenance'
                        WHEN j > 0 AND j %% 2 = 0 AND j < last THEN 'HTTP 503 from the destination' ELSE '' END,
                   t + j * %(event_step)s::interval, md5(g::text) || md5((g + 1)::text),
                   md5((g + 1)::text) || md5(g::text),
                   'bench'
            FROM (SELECT s.*, (i - 1) * %(per)s + j + 1 AS g, %(per)s - 1 AS last,
                         (i %% 1000 = 0 AND j = 2) AS paused
                  FROM s) AS e""",
            ],
        ),
    ]
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        superuser = cursor.fetchone()[0]
    chunks = [(lo, min(lo + CHUNK - 1, n)) for lo in range(1, n + 1, CHUNK)]
    with _indexes_rebuilt(LOADED_TABLES) if rebuild_indexes else contextlib.nullcontext():
        for label, sqls in statements:
            started = time.perf_counter()
            for number, (lo, hi) in enumerate(chunks, 1):
                with transaction.atomic(), connection.cursor() as cursor:
                    cursor.execute("SET LOCAL synchronous_commit = off")
                    if superuser:
                        # Skips the deferred foreign-key checks at commit (a minute for the audit events
                        # alone): the rows are generated consistent. Needs a superuser; others just wait.
                        cursor.execute("SET LOCAL session_replication_role = replica")
                    for sql in sqls:
                        cursor.execute(sql, params | {"lo": lo, "hi": hi})
                if len(chunks) > 1:
                    _progress(f"  {label}: operations 1-{hi:,} of {n:,}", started, number / len(chunks))
            print(f"  loaded {label} ({part}) in {time.perf_counter() - started:.0f} s", flush=True)
    started = time.perf_counter()
    # Ids above the whole series's, whichever part is loaded, so that what the bench writes
    # between the sample and the rest never takes an id the rest will insert.
    highest = {"ledger_delivery": 4 * n, "ledger_auditevent": _audit_ids_from() + per_operation * n}
    with connection.cursor() as cursor:
        for table in LOADED_TABLES:
            cursor.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), greatest((SELECT max(id) FROM {table}), %s))",
                [highest.get(table, n)],
            )
            table_started = time.perf_counter()
            cursor.execute(f"VACUUM ANALYZE {table}")
            if time.perf_counter() - table_started > 10:
                print(f"  vacuumed and analysed {table} in {time.perf_counter() - table_started:.0f} s", flush=True)
    print(f"  vacuumed and analysed in {time.perf_counter() - started:.0f} s", flush=True)


def _progress(what: str, started: float, done: float) -> None:
    took = time.perf_counter() - started
    print(f"{what} in {took:.0f} s (~{took / done * (1 - done):.0f} s to go)", flush=True)


@contextlib.contextmanager
def _indexes_rebuilt(tables: tuple[str, ...]):
    """Drop the indexes of ``tables`` that back no constraint (primary keys and unique constraints
    stay), and create them again on exit, as they were defined: building an index over the loaded
    rows is much faster than growing it row by row (a built index is also denser than a grown one).
    Indexes of a partitioned table are dropped and built on the parent, for every partition."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.relname, pg_get_indexdef(x.indexrelid), t.relname FROM pg_index x
            JOIN pg_class c ON c.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
            WHERE t.relname = ANY(%s) AND t.relnamespace = current_schema()::regnamespace
              AND NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conindid = x.indexrelid)
            ORDER BY t.relname, c.relname""",
            [list(tables)],
        )
        indexes = cursor.fetchall()
        for name, _, _ in indexes:
            cursor.execute(f'DROP INDEX "{name}"')
    print(f"  dropped {len(indexes)} indexes to build them again after the load", flush=True)
    yield
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SET maintenance_work_mem = '512MB'")
        # Progress by the pages read: each index weighs its table's size (with its partitions).
        cursor.execute(
            "SELECT relname, coalesce((SELECT sum(pg_relation_size(relid)) FROM pg_partition_tree(relname::regclass)), "
            "pg_relation_size(relname::regclass)) FROM unnest(%s::text[]) AS relname",
            [list(tables)],
        )
        sizes = {table: max(float(size or 0), 1.0) for table, size in cursor.fetchall()}
        total, built = sum(sizes[table] for _, _, table in indexes), 0.0
        for number, (name, definition, table) in enumerate(sorted(indexes, key=lambda index: sizes[index[2]]), 1):
            # A partitioned table's index reads "ON ONLY": built on the parent alone, it would stay invalid.
            cursor.execute(definition.replace(" ON ONLY ", " ON ", 1))
            built += sizes[table]
            _progress(f"  built index {name} ({number} of {len(indexes)})", started, built / total)
        cursor.execute("RESET maintenance_work_mem")


def _columns(cursor, table: str) -> set[str]:
    cursor.execute("SELECT column_name FROM information_schema.columns WHERE table_name = %s", [table])
    return {row[0] for row in cursor.fetchall()}


def prepare(*, between=None, rebuild_indexes: bool = False) -> tuple[dict[str, int], dict[str, int]]:
    """Workspaces, people and switches through the services; the bulk with SQL (``load``) when empty.

    With ``between`` (a callable) and SCALE_SMALL below SCALE_OPERATIONS, the bulk is loaded in two
    parts: a sample of SCALE_SMALL operations (the same 13 months, the same mix), then
    ``between()``, then the rest. ``rebuild_indexes``: see ``load``."""
    from django.contrib.auth.models import User

    from ledger.core import accounts
    from ledger.models import Heartbeat, Operation, Workspace
    from ledger.people import pause

    if not Workspace.objects.filter(slug=WORKSPACES[0][0]).exists():
        for slug, _ in WORKSPACES:
            accounts.create_workspace(slug=slug, approved_owners=["ops"], actor="bench")
        User.objects.create_superuser("scale-admin", password=PASSWORD)
        member = User.objects.create_user("scale-member", password=PASSWORD, is_staff=True)
        for name in ("alice", "bob"):
            User.objects.create_user(name, password=PASSWORD)
        globex = Workspace.objects.get(slug="globex")
        accounts.set_membership(workspace=globex, user=member, role="operator", actor="bench")
        pause.set_paused(
            paused=True, actor="alice", reason="destination maintenance", workspace=globex, action="send-notice"
        )
        Heartbeat.objects.update_or_create(name="sweep", defaults={"beat_at": _now(), "detail": {}})
    workspaces = dict(Workspace.objects.values_list("slug", "pk"))
    users = dict(User.objects.values_list("username", "pk"))
    if not Operation.objects.exists():
        _audit_partitions()
        _operation_ranges()
        print(f"loading {OPERATIONS:,} operations and {AUDIT_EVENTS:,} audit events ...", flush=True)
        started = time.perf_counter()
        every = OPERATIONS // SMALL if between is not None and 0 < SMALL < OPERATIONS else 1
        if every > 1:
            load(workspaces, users, part="sample", every=every)
            print(f"loaded a sample of {OPERATIONS // every:,} operations in {time.perf_counter() - started:.0f} s")
            between()
            started_rest = time.perf_counter()
            load(workspaces, users, part="rest", every=every, rebuild_indexes=rebuild_indexes)
            print(f"loaded the rest in {time.perf_counter() - started_rest:.0f} s", flush=True)
        else:
            load(workspaces, users, rebuild_indexes=rebuild_indexes)
        print(f"loaded in {time.perf_counter() - started:.0f} s", flush=True)
    return workspaces, users


def _audit_partitions() -> None:
    """The audit trail's monthly partitions for the loaded 13 months, this month and the next."""
    from ledger.core.audit_partitions import ensure_range

    start = _month_start(_anchor() - timedelta(hours=1) - SPAN)
    end = _month_start(_month_start(_anchor()) + timedelta(days=62))
    made = ensure_range(start, end)
    print(f"audit partitions from {start:%Y-%m} to {end:%Y-%m}: {len(made.created)} created", flush=True)


def _operation_ranges() -> None:
    """The deliveries' and attempts' ranges of operations for every operation loaded (1,000,000
    ids each, as the migration makes them), and two more."""
    from ledger.core import operation_partitions

    made = operation_partitions.ensure(width=1_000_000, upto=OPERATIONS + 2_000_000)
    print(f"ranges of operations: {len(made.created) // 2} created", flush=True)


def _month_start(moment: datetime) -> datetime:
    return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


@functools.cache
def _audit_ids_from() -> int:
    """The last id of the audit events written before the load (the workspaces', by the services)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(max(id), 0) FROM ledger_auditevent")
        return cursor.fetchone()[0]


@functools.cache
def _anchor() -> datetime:
    """Now, as the loader first saw it: both parts of a load are laid out against the same clock."""
    return _now()


def _now():
    from django.utils import timezone

    return timezone.now()


# --- requesting --------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    user: str
    times_ms: list[float]
    queries: int
    status: int
    slowest_sql: str = ""
    slowest_ms: float = 0.0

    @property
    def p50(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def p95(self) -> float:
        ordered = sorted(self.times_ms)
        return ordered[max(0, round(0.95 * len(ordered)) - 1)]


def pages(workspaces: dict[str, int]) -> list[tuple[str, str]]:
    """(name, path) of every page measured. Deep pages are reached the way a person reaches them:
    the console by following its "Older" link (a cursor) from a row deep in the list, the admin by
    page number."""
    from django.contrib.admin import site
    from django.utils.http import urlencode

    from ledger.models import AuditEvent, Operation
    from ledger.reads.failure_groups import failure_groups
    from ledger.states import ATTENTION_STATES

    globex = workspaces["globex"]
    # An operation the member may see (globex), needing review: its page, and searches for it.
    op = Operation.objects.filter(workspace_id=globex, state="needs_review").order_by("-id").first()
    request_id = op.payload["request_id"]
    # The destination's record id of an operation the member may see (one answer: the find box
    # would redirect to it, so it is measured in the queue and audit searches).
    record_id = (
        Operation.objects.filter(workspace_id=globex)
        .exclude(external_id="")
        .values_list("external_id", flat=True)
        .order_by("-id")
        .first()
    )
    queue_depth, audit_depth = OPERATIONS // 200, AUDIT_EVENTS // 10  # rows before the deep page
    deep_queue = _cursor(
        Operation.objects.filter(workspace_id=globex, state__in=ATTENTION_STATES)
        .order_by("-updated_at", "-id")
        .values_list("updated_at", "id")[queue_depth]
    )
    deep_audit = _cursor(
        AuditEvent.objects.filter(workspace_id=globex)
        .order_by("-created_at", "-id")
        .values_list("created_at", "id")[audit_depth]
    )
    day = (op.created_at).date()
    [group, *_], _ = failure_groups(Operation.objects.all())
    console = [
        ("console queue", "/console/"),
        ("console queue, state all", "/console/?state=all"),
        ("console queue, state unknown", "/console/?state=unknown"),
        ("console queue, workspace+action", f"/console/?workspace={globex}&action=file-ticket"),
        ("console queue, search request id", f"/console/?q={request_id}"),
        ("console queue, search key", f"/console/?q={op.key}"),
        ("console queue, search no match", "/console/?q=no-such-thing"),
        ("console queue, deep page", f"/console/?{deep_queue}&page={queue_depth // 50}"),
        ("console queue, arrived oldest first", "/console/?sort=oldest"),
        (
            "console queue, oldest refunds awaiting approval",
            "/console/?state=pending_approval&action=issue-refund&sort=oldest",
        ),
        ("console queue, review least updated first", "/console/?state=needs_review&sort=least_updated"),
        ("console export, refunds awaiting approval", "/console/export.csv?state=pending_approval&action=issue-refund"),
        ("console export, audit kind (rare)", "/console/audit/export.csv?kind=paused"),
        ("console operation page", f"/console/operations/{op.pk}/"),
        ("console controls", "/console/controls/"),
        ("console failures", "/console/failures/"),
        ("console approvals", "/console/approvals/"),
        (
            "console queue, failure group",
            f"/console/?{urlencode({'state': 'needs_review', 'group': str(group.criterion)})}",
        ),
        ("console audit", "/console/audit/"),
        ("console dashboard", "/console/dashboard/"),
        ("console audit, kind (rare)", "/console/audit/?kind=paused"),
        ("console audit, kind (common)", "/console/audit/?kind=claimed"),
        ("console audit, actor (rare)", "/console/audit/?actor=alice"),
        ("console audit, actor no match", "/console/audit/?actor=nobody-at-all"),
        ("console audit, workspace", f"/console/audit/?workspace={globex}"),
        ("console audit, key", f"/console/audit/?key={request_id}"),
        ("console audit, key no match", "/console/audit/?key=no-such-thing"),
        ("console audit, one day", f"/console/audit/?created_after={day}&created_before={day}"),
        ("console audit, deep page", f"/console/audit/?{deep_audit}&page={audit_depth // 100}"),
        ("console queue, search record id", f"/console/?q={record_id}"),
        ("console audit, record id", f"/console/audit/?key={record_id}"),
        ("console find, no match", "/console/find/?q=no-such-thing"),
        ("console find, start of many keys", "/console/find/?q=globex:R-1"),
        ("console deliveries", "/console/deliveries/"),
        ("console deliveries, outcome", "/console/deliveries/?outcome=conflict"),
        ("console queue, error category", "/console/?category=permanent"),
        ("console queue, older than 24h", "/console/?age=24h"),
        ("console queue, destination", "/console/?destination=file-ticket"),
        ("console all operations", "/console/operations/"),
        ("console all operations, succeeded", "/console/operations/?state=succeeded"),
        ("console all operations, needs review", "/console/operations/?state=needs_review"),
        ("console all operations, workspace+action", f"/console/operations/?workspace={globex}&action=file-ticket"),
        ("console all operations, oldest first", "/console/operations/?sort=oldest"),
        ("console all operations, deep page", f"/console/operations/?older={op.pk - OPERATIONS // 2}"),
        ("console deliveries, workspace", f"/console/deliveries/?workspace={globex}"),
        ("console find, record id", f"/console/find/?q={record_id}"),
        ("console conflicts", "/console/conflicts/"),
        ("console service levels", "/console/service-levels/"),
        ("console mismatches", "/console/mismatches/"),
        ("console conflicts, workspace", f"/console/conflicts/?workspace={globex}"),
        ("console conflicts, held", "/console/conflicts/?state=held"),
        ("console conflicts, one action", "/console/conflicts/?state=dismiss_only&action=prepare-brief"),
        ("console conflicts, decided", "/console/conflicts/?state=decided"),
    ]
    registered = sorted(model._meta.model_name for model in site._registry if model._meta.app_label == "ledger")
    admin = [(f"admin {model}", f"/admin/ledger/{model}/") for model in registered]
    admin += [
        ("admin operation, search request id", f"/admin/ledger/operation/?q={request_id}"),
        ("admin operation, search key", f"/admin/ledger/operation/?q={op.key}"),
        ("admin operation, search no match", "/admin/ledger/operation/?q=no-such-thing"),
        ("admin operation, state filter", "/admin/ledger/operation/?state__exact=needs_review"),
        ("admin operation, action filter", "/admin/ledger/operation/?action=issue-refund"),
        ("admin operation, workspace filter", f"/admin/ledger/operation/?workspace__id__exact={globex}"),
        ("admin operation, deep page", "/admin/ledger/operation/?p=20"),
        ("admin delivery, search", f"/admin/ledger/delivery/?q={request_id}"),
        ("admin delivery, outcome filter", "/admin/ledger/delivery/?outcome__exact=invalid"),
        ("admin delivery, outcome filter (none)", "/admin/ledger/delivery/?outcome__exact=stale"),
        ("admin delivery, deep page", "/admin/ledger/delivery/?p=20"),
        ("admin conflict, search", f"/admin/ledger/conflict/?q={request_id}"),
        ("admin auditevent, search", f"/admin/ledger/auditevent/?q={request_id}"),
        ("admin auditevent, search no match", "/admin/ledger/auditevent/?q=no-such-thing"),
        ("admin auditevent, kind filter", "/admin/ledger/auditevent/?kind=paused"),
        ("admin auditevent, deep page", "/admin/ledger/auditevent/?p=20"),
        ("admin reviewdraft, search", f"/admin/ledger/reviewdraft/?q={request_id}"),
        ("admin attempt, search", f"/admin/ledger/attempt/?q={request_id}"),
        ("admin attempt, deep page", "/admin/ledger/attempt/?p=20"),
        ("admin attempt, outcome filter (none)", "/admin/ledger/attempt/?outcome__exact=abandoned"),
        ("admin attempt, outcome filter", "/admin/ledger/attempt/?outcome__exact=permanent"),
        ("admin approval, search", f"/admin/ledger/approval/?q={request_id}"),
        ("admin contribution, search person", "/admin/ledger/contribution/?q=alice"),
        ("admin contribution, search key", f"/admin/ledger/contribution/?q={request_id}"),
    ]
    return [(name, path) for name, path in console + admin if ONLY in name]


def _cursor(row) -> str:
    """The console's "Older" link from this row (a keyset cursor: time and id)."""
    at, pk = row
    return f"older={at:%Y-%m-%dT%H:%M:%S.%fZ}_{pk}"


def expected(name: str) -> int:
    """The answer a page must give: 200, or the redirect to the one operation found."""
    return 302 if name == "console find, record id" else 200


def measure(name: str, path: str, user: str, client) -> Result:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def get(path):
        response = client.get(path)
        if response.streaming:  # an export: timed until its last row is written
            b"".join(response.streaming_content)
        return response

    for _ in range(WARMUP):
        get(path)
    times = []
    for _ in range(REPEAT):
        started = time.perf_counter()
        response = get(path)
        times.append((time.perf_counter() - started) * 1000)
    with CaptureQueriesContext(connection) as queries:
        response = get(path)
    slowest = max(queries.captured_queries, key=lambda q: float(q["time"]), default={"sql": "", "time": "0"})
    return Result(name, user, times, len(queries), response.status_code, slowest["sql"], float(slowest["time"]) * 1000)


def explain(sql: str) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
        return "\n".join(row[0] for row in cursor.fetchall())


def run(database_label: str, log_dir: Path) -> None:
    import django

    django.setup()
    # Not a line per page request on the terminal (the gunicorn measured keeps its access log).
    logging.getLogger("opsconsole.access").setLevel(logging.WARNING)
    from django.core.management import call_command

    from bench import scale_costs
    from ledger.models import Operation

    call_command("migrate", verbosity=0)
    token = scale_costs.prepare_workspace()
    small = scale_costs.SmallCopy()
    ledgers = {}

    def copy_small() -> None:
        ledgers[f"{Operation.objects.count():,} operations"] = (small.url, token)
        small.create()

    try:
        workspaces, _ = prepare(between=copy_small, rebuild_indexes=REBUILD_INDEXES)
        measure_at_scale(database_label, workspaces, ledgers, log_dir)
    finally:
        small.drop()


def measure_at_scale(database_label: str, workspaces: dict[str, int], ledgers: dict, log_dir: Path) -> None:
    """The dashboard's samples; intake and claims on ``ledgers`` (label: URL and token) and on this
    database; the pages; the purge."""
    from django.contrib.auth.models import User
    from django.test import Client

    from bench import scale_costs
    from ledger.models import Operation

    # The dashboard's hourly figures are the sweep's samples: the first one counts the day from the
    # audit trail (here all at once; a sweep takes dashboard.CATCH_UP hours a run).
    from ledger.reads import dashboard

    started = time.perf_counter()
    if dashboard.take_samples(catch_up=dashboard.HOURS + 1):
        print(
            f"dashboard samples of the last {dashboard.HOURS} hours taken in {time.perf_counter() - started:.1f} s",
            flush=True,
        )
    audit_rows = _estimated_rows("ledger_auditevent")
    print(
        f"database: {database_label}; {Operation.objects.count():,} operations, ~{audit_rows:,} "
        f"audit events (estimate), {_database_size()} on disk; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    ledgers[f"{Operation.objects.count():,} operations"] = (os.environ["DATABASE_URL"], scale_costs.fresh_token())
    costs = scale_costs.measure(ledgers, log_dir)
    if len(costs) == 2:
        print("\n".join(scale_costs.compare(*costs.values())), flush=True)
    else:
        print(
            f"intake and claim cost not compared: no sample was loaded first (SCALE_SMALL {SMALL:,}, SCALE_OPERATIONS "
            f"{OPERATIONS:,}{', the kept database already loaded' if KEEP else ''})",
            flush=True,
        )
    print(f"\n{REPEAT} timed requests per page after {WARMUP} warm-up", flush=True)
    print(f"{'page':42} {'user':13} {'HTTP':>4} {'p50 ms':>8} {'p95 ms':>8} {'SQL':>5}  p95 < {BUDGET_MS} ms")
    results = []
    for username in ("scale-admin", "scale-member"):
        client = Client()
        client.force_login(User.objects.get(username=username))
        for name, path in pages(workspaces):
            if username == "scale-member" and path.startswith(("/admin/ledger/membership/", "/console/approvals/")):
                continue  # superusers only (the member is an operator: approving is not theirs)
            result = measure(name, path, username, client)
            results.append(result)
            verdict = "PASS" if result.p95 < BUDGET_MS and result.status == expected(name) else "FAIL"
            print(
                f"{name:42} {username:13} {result.status:4} {result.p50:8.1f} {result.p95:8.1f} "
                f"{result.queries:5}  {verdict}",
                flush=True,
            )
            if EXPLAIN and result.slowest_sql:
                print(f"    slowest query {result.slowest_ms:.1f} ms:\n    {result.slowest_sql[:600]}")
                print(re.sub(r"^", "      ", explain(result.slowest_sql), flags=re.M))
    failed = [r for r in results if r.p95 >= BUDGET_MS or r.status != expected(r.name)]
    print(
        f"\n{len(results) - len(failed)} of {len(results)} pages PASS (p95 < {BUDGET_MS} ms, the expected status); "
        f"load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    for result in failed:
        print(f"  FAIL {result.name} as {result.user}: p95 {result.p95:.0f} ms, status {result.status}")
    purge_oldest_audit_month()
    purge_oldest_operation_range()


# --- the purge of a month past its window ----------------------------------------------------------

# The tables whose dead tuples a purge must not leave (each with its partitions, if partitioned).
PURGED_TABLES = ("ledger_auditevent", "ledger_delivery", "ledger_attempt")
PURGE_BUDGET_S = 1.0


@dataclass
class Purge:
    what: str  # what the purge said it did
    seconds: float  # its statement time: the wall time of the callable
    dead_tuples_made: int  # over PURGED_TABLES and their partitions, as they are after it

    @property
    def verdict(self) -> str:
        return "PASS" if self.seconds < PURGE_BUDGET_S and self.dead_tuples_made == 0 else "FAIL"

    @property
    def line(self) -> str:
        return (
            f"{self.what}: {self.seconds * 1000:.0f} ms of statement time (< {PURGE_BUDGET_S:.0f} s), "
            f"{self.dead_tuples_made} dead tuples made in {', '.join(PURGED_TABLES)} (0)  {self.verdict}"
        )


def measure_purge(purge) -> Purge:
    """Run ``purge()`` (a callable doing the purge in this process's database connection and saying
    what it did): its wall time, and the dead tuples it left in the audit trail, the deliveries and
    the attempts (per table and partition, those of a dropped one gone with it)."""
    before = _dead_tuples(PURGED_TABLES)
    started = time.perf_counter()
    what = purge()
    seconds = time.perf_counter() - started
    after = _dead_tuples(PURGED_TABLES)
    made = sum(max(0, dead - before.get(relation, 0)) for relation, dead in after.items())
    return Purge(what, seconds, made)


def _dead_tuples(tables: tuple[str, ...]) -> dict[str, int]:
    """Dead tuples of ``tables`` and of every partition of theirs, by relation, as of now: this
    connection's own counts flushed first (PostgreSQL 15 sends them when the session goes idle)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            """
            WITH RECURSIVE relation AS (
                SELECT oid FROM pg_class WHERE relname = ANY(%s) AND relnamespace = current_schema()::regnamespace
                UNION ALL
                SELECT inhrelid FROM pg_inherits JOIN relation ON inhparent = relation.oid
            )
            SELECT oid::regclass::text, pg_stat_get_dead_tuples(oid) FROM relation""",
            [list(tables)],
        )
        return dict(cursor.fetchall())


def purge_oldest_audit_month() -> None:
    """The purge of a month past its window: the statements ``manage.py archive_audit`` runs once
    the month is in its file (ledger.core.audit_archive), its partition detached and dropped. The
    file itself is not written here: the loaded events form no chain, which the archive's checks
    would refuse (tests/ledger/core/test_audit_partitions.py archives real chains)."""
    from django.db import connection

    print("\npurge of a month past its window:", flush=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = 'ledger_auditevent'::regclass")
        if cursor.fetchone()[0] != "p":
            print("  skipped: ledger_auditevent is not partitioned here (no month to drop whole)", flush=True)
            return
        oldest = _oldest_audit_partition(cursor)
    if oldest is None:
        print("  skipped: ledger_auditevent has no monthly partition", flush=True)
        return
    purge = measure_purge(lambda: _drop_audit_partition(oldest))
    print(f"  {purge.line}", flush=True)


def purge_oldest_operation_range() -> None:
    """The drop of the oldest range of operations' deliveries and attempts, as the purge runs it
    (``ledger.retention``) once every operation of the range is past its key window: the loader's
    range holds unfinished operations and conflicts, so first (not measured) its unfinished
    operations are set succeeded and its conflicts deleted, as the windows and the purge would
    have; then ``ledger_drop_operation_range`` is measured, its look at the range's operations
    included."""
    from django.db import connection, transaction

    from ledger.core import operation_partitions
    from ledger.states import TERMINAL_STATES

    print("\npurge of a range of operations past its key window:", flush=True)
    found = operation_partitions.ranges()
    if not found:
        print("  skipped: no range of operations (deliveries and attempts are not partitioned here)", flush=True)
        return
    oldest = found[0]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_operation SET state = 'succeeded' WHERE id >= %s AND id < %s AND NOT state = ANY(%s)",
            [oldest.first, oldest.end, [str(state) for state in TERMINAL_STATES]],
        )
        cursor.execute(
            "DELETE FROM ledger_conflict WHERE operation_id >= %s AND operation_id < %s", [oldest.first, oldest.end]
        )
    rows = sum(_estimated_rows(partition) for partition in oldest.partitions)

    def drop() -> str:
        with transaction.atomic():
            operation_partitions.drop_range(oldest.first)
        return f"operations {oldest.first:,}-{oldest.end - 1:,} (~{rows:,} deliveries and attempts) dropped"

    purge = measure_purge(drop)
    print(f"  {purge.line}", flush=True)


def _oldest_audit_partition(cursor) -> str | None:
    """The partition holding the oldest month (the DEFAULT partition is not a month)."""
    cursor.execute(
        """
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'ledger_auditevent'::regclass AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'
        ORDER BY pg_get_expr(c.relpartbound, c.oid) LIMIT 1"""
    )
    row = cursor.fetchone()
    return row[0] if row else None


def _drop_audit_partition(name: str) -> str:
    from django.db import connection, transaction

    rows = _estimated_rows(name)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE ledger_auditevent DETACH PARTITION "{name}"')
        cursor.execute(f'DROP TABLE "{name}"')
    return f"{name} (~{rows:,} audit events) detached and dropped"


def _estimated_rows(table: str) -> int:
    """The planner's row count of ``table``, summed over its partitions if it has any."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH RECURSIVE relation AS (
                SELECT oid, relkind, reltuples FROM pg_class WHERE oid = %s::regclass
                UNION ALL
                SELECT c.oid, c.relkind, c.reltuples FROM pg_inherits JOIN relation ON inhparent = relation.oid
                JOIN pg_class c ON c.oid = inhrelid
            )
            SELECT coalesce(sum(greatest(reltuples, 0)) FILTER (WHERE relkind <> 'p'), 0)::bigint FROM relation""",
            [table],
        )
        return cursor.fetchone()[0]


def _database_size() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_size_pretty(pg_database_size(current_database()))")
        return cursor.fetchone()[0]


if __name__ == "__main__":
    main()
