"""Benchmark: bytes per row, with their indexes, of the tables that grow with the traffic.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/opsconsole make bench-sizes

The figures behind docs/operations.md's "Capacity". Like bench/purge.py it never touches the
database in DATABASE_URL: it creates ``sizes_<name>`` beside it, migrates it, loads it with
bench/scale.py's SQL loader (operations in the states a day's traffic leaves them, one accepted
delivery each plus duplicates, conflicting and invalid ones, an attempt per operation that ran,
five audit events per operation), runs ``VACUUM ANALYZE`` as autovacuum would, prints per table its
rows and ``pg_relation_size`` (the heap), ``pg_indexes_size`` and ``pg_total_relation_size`` (heap,
TOAST and indexes) divided by them, and drops the database at the end.

It also prints how many indexes ``manage.py reindex`` would call bloated on this freshly loaded
data with no floor (``ledger.reindex``): 0 is the rule's estimate holding on today's schema.

Environment: SIZES_OPERATIONS (100000), SIZES_KEEP=1 (keep the database at the end).
"""

import os
import sys
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
OPERATIONS = int(os.environ.get("SIZES_OPERATIONS", "100000"))
AUDIT_PER_OPERATION = 5  # as bench/scale.py loads them: the events of an operation's ordinary life
KEEP = os.environ.get("SIZES_KEEP", "") not in ("", "0")
TABLES = ["ledger_operation", "ledger_delivery", "ledger_attempt", "ledger_auditevent"]


def main() -> None:
    sys.path.insert(0, str(PROJECT_DIR))
    from bench.harness import run_in_scratch_database

    run_in_scratch_database("sizes", run, keep=KEEP)


def run(database_label: str) -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from bench import purge, scale

    call_command("migrate", verbosity=0)
    print(f"database: {database_label}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    scale.OPERATIONS = OPERATIONS
    scale.BACKLOG = OPERATIONS // 10  # a day's arrivals still due: the rows a live table also holds
    scale.AUDIT_EVENTS = AUDIT_PER_OPERATION * OPERATIONS
    print(f"loading {OPERATIONS:,} operations and {scale.AUDIT_EVENTS:,} audit events (bench/scale.py) ...", flush=True)
    purge.load_with_scale()
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {', '.join(TABLES)}")
    print_sizes(sizes())
    print_estimate()


def sizes() -> list[tuple[str, int, int, int, int, int]]:
    """Per table: rows, heap bytes, index bytes, total bytes, indexes."""
    from django.db import connection

    from ledger import reindex

    found = []
    with connection.cursor() as cursor:
        for table in TABLES:
            # Summed over its partitions where it has them (a partitioned table itself holds nothing).
            cursor.execute(
                f"SELECT (SELECT count(*) FROM {table}), sum(pg_relation_size(part))::bigint, "
                "sum(pg_indexes_size(part))::bigint, sum(pg_total_relation_size(part))::bigint, "
                "(SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass) "
                "FROM unnest(%s::regclass[]) AS part",
                [table, reindex.leaves(cursor, [table])],
            )
            found.append((table, *cursor.fetchone()))
    return found


def print_sizes(found) -> None:
    print()
    print("| table | rows | heap B/row | indexes | indexes B/row | total B/row |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for table, rows, heap, indexes, total, count in found:
        per = max(rows, 1)
        print(f"| `{table}` | {rows:,} | {heap / per:.0f} | {count} | {indexes / per:.0f} | {total / per:.0f} |")
    print()


def print_estimate() -> None:
    from django.db import connection

    from ledger import reindex

    with connection.cursor() as cursor:
        indexes = reindex.index_sizes(cursor, reindex.leaves(cursor, TABLES))
    bloated = [index for index in indexes if index.bloated(min_waste=0)]
    widest = max(indexes, key=lambda index: index.size / index.expected)
    print(
        f"manage.py reindex's rule, no floor, on this fresh load: {len(bloated)} of {len(indexes)} B-tree indexes "
        f"called bloated{': ' + ', '.join(reindex.describe(index) for index in bloated) if bloated else ''}; "
        f"the largest size over expected {widest.size / widest.expected:.2f} (rebuilt above {reindex.FACTOR}): "
        f"{reindex.describe(widest)}"
    )
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
