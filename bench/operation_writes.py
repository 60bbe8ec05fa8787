"""Benchmark: what the operation table's own writes cost, alone: its indexes, nothing else.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/opsconsole make bench-writes

Like bench/row_sizes.py it never touches the database in DATABASE_URL: it creates ``writes_<name>``
beside it, migrates it and drops it at the end. In it, a copy of ``ledger_operation`` with every
index the migrations give it (``CREATE TABLE .. (LIKE .. INCLUDING ALL)``) takes WRITES_OPERATIONS
operations through a caller's claim and its succeeded report, one set-based statement a step, two
ways: created ``pending`` then claimed (an insert, then an update to ``processing``: as
``ledger_claim`` did before migration 0063) and created claimed (one insert in ``processing``); and
with the index on ``(state, next_attempt_at)`` as migration 0064 left it (without the succeeded
operations) and as it was before (every operation). Each statement runs under ``EXPLAIN (ANALYZE,
WAL)``: per operation, the WAL bytes it wrote (its heap and index entries) and its execution time.
WRITES_ROUNDS rounds, each of the four variants in turn; the medians are printed. The rows are
shaped as an invoice's (a payload with its request id, which the trigram index reads).

Environment: WRITES_OPERATIONS (20000), WRITES_ROUNDS (3).
"""

import os
import statistics
import sys
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
OPERATIONS = int(os.environ.get("WRITES_OPERATIONS", "20000"))
ROUNDS = int(os.environ.get("WRITES_ROUNDS", "3"))
COPY = "bench_operation_writes"

# The columns a caller's claim writes; the rest take their defaults (none: the copy has Django's).
COLUMNS = (
    "key, action, key_recipe, definition_version, fingerprint, payload, correlation_id, submitted_by, state, attempts,"
    " next_attempt_at, deadline, lease_owner, lease_expires_at, fencing_token, last_error_category, last_error_message,"
    " result, external_id, created_at, updated_at, workspace_id, ordered, series"
)
ROWS = """
SELECT 'bench:INV-' || g || ':v1:send-invoice', 'send-invoice', 1, '1', md5(g::text),
       jsonb_build_object('request_id', 'INV-' || g, 'customer_id', 'C-1001', 'amount_cents', 4500, 'currency', 'EUR'),
       '', 'bench', %(state)s::text, %(attempts)s::int, NULL::timestamptz, now() + interval '1 day', %(owner)s::text,
       CASE WHEN %(owner)s::text <> '' THEN now() + interval '5 minutes' END, %(attempts)s::bigint, '', '', NULL::jsonb,
       '', now(), now(), %(workspace)s::bigint, 'unordered', ''
FROM generate_series(1, %(n)s) AS g"""
CLAIM = (
    f"UPDATE {COPY} SET state = 'processing', attempts = attempts + 1, fencing_token = fencing_token + 1,"
    " lease_owner = 'caller', lease_expires_at = now() + interval '5 minutes', updated_at = now(),"
    " state_changed_at = now()"
)
SUCCEED = (
    f"UPDATE {COPY} SET state = 'succeeded', external_id = 'in_' || id, result = '{{}}', lease_owner = '',"
    " lease_expires_at = NULL, updated_at = now(), state_changed_at = now()"
)


def main() -> None:
    sys.path.insert(0, str(PROJECT_DIR))
    from bench.harness import run_in_scratch_database

    run_in_scratch_database("writes", run, keep=False)


def run(database_label: str) -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from ledger.core import accounts

    call_command("migrate", verbosity=0)
    workspace, _ = accounts.create_workspace(slug="bench-writes", approved_owners=["ops"], actor="bench")
    print(
        f"database: {database_label}; {OPERATIONS:,} operations a statement, {ROUNDS} rounds; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    figures: dict[str, dict[str, list[tuple[float, float]]]] = {}
    with connection.cursor() as cursor:
        for _ in range(ROUNDS):
            for due_index in ("without the succeeded", "every operation"):
                for created_claimed in (False, True):
                    _copy_table(cursor, every_operation=due_index == "every operation")
                    variant = (
                        f"state index {due_index}, {'created claimed' if created_claimed else 'pending, then claimed'}"
                    )
                    for step, cost in _life(cursor, workspace.pk, created_claimed).items():
                        figures.setdefault(variant, {}).setdefault(step, []).append(cost)
        cursor.execute(f"DROP TABLE {COPY}")
    print("per operation, the median of the rounds: WAL bytes, execution µs")
    for variant, steps in figures.items():
        medians = {
            step: tuple(statistics.median(cost[i] for cost in costs) for i in (0, 1)) for step, costs in steps.items()
        }
        wal, micros = (sum(cost[i] for cost in medians.values()) for i in (0, 1))
        parts = "; ".join(f"{step} {cost[0]:,.0f} B, {cost[1]:.1f} µs" for step, cost in medians.items())
        print(f"  {variant}: {wal:,.0f} B, {micros:.1f} µs ({parts})")


def _copy_table(cursor, *, every_operation: bool) -> None:
    """The operation table's copy, empty, with its indexes; the state index as 0064 left it or as before."""
    cursor.execute(f"DROP TABLE IF EXISTS {COPY}")
    cursor.execute(f"CREATE TABLE {COPY} (LIKE ledger_operation INCLUDING ALL)")
    if every_operation:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexdef LIKE %s",
            [COPY, "%(state, next_attempt_at) WHERE%"],
        )
        [(name,)] = cursor.fetchall()
        cursor.execute(f'DROP INDEX "{name}"')
        cursor.execute(f"CREATE INDEX ON {COPY} (state, next_attempt_at)")


def _life(cursor, workspace_id: int, created_claimed: bool) -> dict[str, tuple[float, float]]:
    """A claim and its succeeded report for every operation, each step's (WAL bytes, µs) per operation."""
    insert = f"INSERT INTO {COPY} ({COLUMNS}) {ROWS}"
    rows = {"n": OPERATIONS, "workspace": workspace_id}
    if created_claimed:
        steps = {"insert processing": (insert, rows | {"state": "processing", "attempts": 1, "owner": "caller"})}
    else:
        steps = {
            "insert pending": (insert, rows | {"state": "pending", "attempts": 0, "owner": ""}),
            "update to processing": (CLAIM, None),
        }
    steps["update to succeeded"] = (SUCCEED, None)
    return {step: _measured(cursor, sql, params) for step, (sql, params) in steps.items()}


def _measured(cursor, sql: str, params: dict | None) -> tuple[float, float]:
    cursor.execute("EXPLAIN (ANALYZE, WAL, FORMAT JSON) " + sql, params)
    [plan] = _json(cursor.fetchone()[0])
    return plan["Plan"].get("WAL Bytes", 0) / OPERATIONS, plan["Execution Time"] * 1000 / OPERATIONS


def _json(value):
    import json

    return json.loads(value) if isinstance(value, str) else value


if __name__ == "__main__":
    main()
