"""Benchmark: the console and the admin with 1,000,000 operations and 5,000,000 audit events.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/opsconsole make bench-scale

Needs PostgreSQL (the sizes are the point). Like bench/drain.py it never touches the database in
DATABASE_URL: it creates ``scale_<name>`` beside it, migrates it, loads it with SQL
(``generate_series``; a few minutes), runs ``VACUUM ANALYZE`` as autovacuum would have, and drops
it at the end.

What is loaded (three workspaces of 60 %, 30 % and 10 % of the rows, created through the services):
operations (~2 % needing attention, a backlog of SCALE_BACKLOG due that arrived over the last
day, within their deadlines, part of it held by a pause of one workspace's send-notice; the rest
finished), one accepted delivery each plus duplicates, conflicts and invalid ones, one attempt per
operation that ran, review drafts of the succeeded prepare-briefs, contributions, approvals,
conflicts, and five audit events per operation in time order (a rare kind and a rare actor among
them). Audit hashes are
filled with hex of the right width but do not form a chain: nothing here verifies or appends.

Then every console page and every admin changelist (with its search and filters, the first page
and a deep one) is requested through Django's test client, logged in as a superuser and as a staff
member of one workspace (their queries differ), SCALE_REPEAT times each after SCALE_WARMUP
unmeasured requests, and each page's p50, p95 and query count are printed with PASS when its p95 is
under 300 ms. A benchmark reports; it exits 0 either way.

Environment: SCALE_OPERATIONS (1000000), SCALE_AUDIT_EVENTS (5000000), SCALE_BACKLOG (100000: a day's
arrivals waiting, as after a long pause or an outage of the workers), SCALE_REPEAT (20),
SCALE_WARMUP (2), SCALE_ONLY (run only the pages whose name contains this text), SCALE_EXPLAIN=1
(print EXPLAIN ANALYZE of each page's slowest query), SCALE_KEEP=1 (keep the loaded database and
reuse it next time: it is migrated, and loaded only when empty; scale-admin and scale-member log in
with the password below, to look around it with `manage.py runserver`).
"""

import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
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
            run(scratch.label)
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


def load(workspaces: dict[str, int], users: dict[str, int]) -> None:
    """Insert the rows with SQL, in one transaction per table family, then VACUUM ANALYZE."""
    from django.db import connection, transaction

    n = OPERATIONS
    per_operation = max(AUDIT_EVENTS // n, 1)
    ws_ids = [workspaces[slug] for slug, tenths in WORKSPACES for _ in range(tenths)]
    ws_slugs = [slug for slug, tenths in WORKSPACES for _ in range(tenths)]
    params = {
        "n": n,
        "backlog": BACKLOG,
        "ws": ws_ids,
        "slugs": ws_slugs,
        "actions": ACTIONS,
        "per": per_operation,
        "member": users["scale-member"],
        "alice": users["alice"],
        "events": per_operation * n,
        "t0": _now() - timedelta(hours=1) - n * timedelta(seconds=30),
        # The backlog arrived over the last day (after an hour of quiet, as the rest).
        "backlog_t0": _now() - timedelta(hours=1) - timedelta(days=1),
        "backlog_step": timedelta(days=1) / max(BACKLOG, 1),
    }
    with connection.cursor() as cursor:
        operation_columns = _columns(cursor, "ledger_operation")

    # Each row of the series, with what the other statements derive from it. The workspace
    # follows i (interleaved 6:3:1); the action and the fate follow a hash of i.
    def rows(source: str) -> str:
        return (
            """
        WITH base AS (
            SELECT *, (%(ws)s::bigint[])[i %% 10 + 1] AS ws, (%(slugs)s::text[])[i %% 10 + 1] AS slug,
                   (%(actions)s::text[])[(i / 10) %% 10 + 1] AS action, abs(hashint4(i::int) %% 1000) AS r,
                   CASE WHEN i > %(n)s - %(backlog)s
                        THEN %(backlog_t0)s::timestamptz + (i - (%(n)s - %(backlog)s)) * %(backlog_step)s::interval
                        ELSE %(t0)s::timestamptz + i * interval '30 seconds' END AS t
            FROM """
            + source
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

    series = rows("generate_series(1, %(n)s::int) AS i")
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
                # Events of operation i at t + 0, 7, 14 .. seconds, so ids follow time as appends do.
                rows("generate_series(1, %(events)s::int) AS g, LATERAL (SELECT (g - 1) / %(per)s + 1 AS i) AS op")
                + """
            INSERT INTO ledger_auditevent (operation_id, workspace_id, attempt_id, actor, kind, from_state, to_state,
                                           error_category, message, created_at, prev_hash, hash, hash_key)
            SELECT CASE WHEN paused THEN NULL ELSE i END, ws, NULL,
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
                   t + j * interval '7 seconds', md5(g::text) || md5((g + 1)::text), md5((g + 1)::text) || md5(g::text),
                   'bench'
            FROM (SELECT s.*, (g - 1) %% %(per)s AS j, %(per)s - 1 AS last,
                         (i %% 1000 = 0 AND (g - 1) %% %(per)s = 2) AS paused
                  FROM s) AS e""",
            ],
        ),
    ]
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        superuser = cursor.fetchone()[0]
    for label, sqls in statements:
        started = time.perf_counter()
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit = off")
            if superuser:
                # Skips the deferred foreign-key checks at commit (a minute for the audit events
                # alone): the rows are generated consistent. Needs a superuser; others just wait.
                cursor.execute("SET LOCAL session_replication_role = replica")
            for sql in sqls:
                cursor.execute(sql, params)
        print(f"  loaded {label} in {time.perf_counter() - started:.0f} s", flush=True)
    started = time.perf_counter()
    with connection.cursor() as cursor:
        for table in (
            "ledger_delivery",
            "ledger_operation",
            "ledger_attempt",
            "ledger_conflict",
            "ledger_reviewdraft",
            "ledger_contribution",
            "ledger_approval",
            "ledger_auditevent",
        ):
            cursor.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT coalesce(max(id), 1) FROM {table}))"
            )
            cursor.execute(f"VACUUM ANALYZE {table}")
    print(f"  vacuumed and analysed in {time.perf_counter() - started:.0f} s", flush=True)


def _columns(cursor, table: str) -> set[str]:
    cursor.execute("SELECT column_name FROM information_schema.columns WHERE table_name = %s", [table])
    return {row[0] for row in cursor.fetchall()}


def prepare() -> tuple[dict[str, int], dict[str, int]]:
    """Workspaces, people and switches through the services; the bulk with SQL (``load``) when empty."""
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
        print(f"loading {OPERATIONS:,} operations and {AUDIT_EVENTS:,} audit events ...", flush=True)
        started = time.perf_counter()
        load(workspaces, users)
        print(f"loaded in {time.perf_counter() - started:.0f} s", flush=True)
    return workspaces, users


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


def run(database_label: str) -> None:
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from ledger.models import Operation

    call_command("migrate", verbosity=0)
    workspaces, _ = prepare()
    # The dashboard's hourly figures are the sweep's samples: the first one counts the day from the
    # audit trail (here all at once; a sweep takes dashboard.CATCH_UP hours a run).
    from ledger.reads import dashboard

    started = time.perf_counter()
    if dashboard.take_samples(catch_up=dashboard.HOURS + 1):
        print(
            f"dashboard samples of the last {dashboard.HOURS} hours taken in {time.perf_counter() - started:.1f} s",
            flush=True,
        )
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE relname = 'ledger_auditevent'")
        audit_rows = cursor.fetchone()[0]
    print(
        f"database: {database_label}; {Operation.objects.count():,} operations, ~{audit_rows:,} audit events "
        f"(estimate); {REPEAT} timed requests per page after {WARMUP} warm-up; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
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


if __name__ == "__main__":
    main()
