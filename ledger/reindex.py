"""Rebuilding the purged tables' indexes: VACUUM frees their pages for reuse but never returns them.

A purge deletes old rows in bulk; VACUUM then empties their index pages, and the indexes stay as
large as before (500,000 operations purged: the operation table's indexes 139 MB before, 168 MB
after, still 168 MB after VACUUM). ``reindex`` rebuilds, one at a time with ``REINDEX INDEX
CONCURRENTLY`` (intake keeps writing meanwhile), the indexes of the tables a purge writes
(``retention.written_tables``) that are well above what their entries need.

The rule, kept simple on purpose (no extension such as pgstattuple is assumed): a B-tree's
*expected* size is its entries (``pg_class.reltuples``, which the purge's VACUUM ANALYZE keeps
current) times the bytes of one entry (a line pointer, an 8-byte tuple header and the key's columns
at their average width in ``pg_stats``), over the leaf pages' 90% fill factor. An index is rebuilt
when it is more than ``FACTOR`` (3) times that and wastes at least ``min_waste`` bytes. The
estimate is rough: an index filled by inserts in no particular order has its leaves ~70% full,
a partial index's keys are wider or narrower than their column's average, deduplication makes some
smaller. Hence the factor of 3 (``make bench-sizes`` checks that no index of a fresh load passes
it) and the floor, which keep a healthy index from being rebuilt week after week for nothing, while
a purge that left a table a third of its size is caught. The GIN indexes (the trigram searches) are
left alone: this estimate does not describe them.

``REINDEX .. CONCURRENTLY`` cannot run inside a transaction block: this runs on the connection in
autocommit. One that fails (a cancel, a unique violation, a lost connection) leaves an INVALID
index named ``*_ccnew`` (or ``*_ccold`` when it failed while swapping), which costs every write and
serves no read: each run drops those first. It takes SHARE UPDATE EXCLUSIVE on the table, which
conflicts with VACUUM and DDL, so two runs never overlap: a session advisory lock, and a second run
finds it taken, says so and does nothing.

The scheduled run has the worker cluster's task timeout (``Q_TIMEOUT``) to live: a worker killed
mid-rebuild would leave a leftover every week and never finish. So it runs with ``seconds``: each
rebuild gets the time that is left as its ``statement_timeout`` (PostgreSQL cancels it cleanly,
and its leftover is dropped at once), none starts once the time is spent, and the report names
what it left for ``manage.py reindex``, which has no time limit.
"""

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from time import monotonic

from django.db import OperationalError, connection

from ledger import retention

FACTOR = 3
MIN_WASTE = 64 * 1024 * 1024  # below this a rebuild frees too little to be worth two table scans
LEAF_FILL = 0.9  # B-tree leaf pages are filled to 90% (the default fillfactor)
UNKNOWN_WIDTH = 8  # an expression's, or a column's before its first ANALYZE
LOCK_KEY = "opsconsole-reindex"


@dataclass
class IndexSize:
    name: str
    table: str
    size: int  # bytes now
    expected: int  # bytes its entries need, by the rule above
    entries: int

    def bloated(self, *, min_waste: int) -> bool:
        return self.size > FACTOR * self.expected and self.size - self.expected >= min_waste


@dataclass
class ReindexReport:
    busy: bool = False  # another run holds the lock: this one did nothing
    dry_run: bool = False
    dropped: list[str] = field(default_factory=list)  # INVALID leftovers of a failed rebuild
    rebuilt: list[tuple[IndexSize, int]] = field(default_factory=list)  # (before, size after)
    kept: list[IndexSize] = field(default_factory=list)
    left: list[IndexSize] = field(default_factory=list)  # bloated, not rebuilt within ``seconds``

    def summary(self) -> str:
        if self.busy:
            return "another reindex is running: did nothing"
        freed = sum(before.size - after for before, after in self.rebuilt)
        verb = "would rebuild" if self.dry_run else "rebuilt"
        return (
            f"{verb} {len(self.rebuilt)} indexes"
            + ("" if self.dry_run else f", {freed // 1024 // 1024} MB freed")
            + f", kept {len(self.kept)}"
            + (f", dropped {len(self.dropped)} invalid leftovers: {', '.join(self.dropped)}" if self.dropped else "")
            + (
                f", left {', '.join(index.name for index in self.left)} (no time left: run manage.py reindex)"
                if self.left
                else ""
            )
        )


def reindex(
    *,
    dry_run: bool = False,
    min_waste: int = MIN_WASTE,
    tables: list[str] | None = None,
    seconds: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> ReindexReport:
    """Drop the INVALID leftovers of failed rebuilds, then rebuild, one at a time and concurrently,
    the indexes of ``tables`` (the purge's) that the rule above says are bloated.

    Runs outside any transaction (refuses inside one) and holds a session advisory lock for its
    whole run. ``dry_run`` lists every index, its size, what it needs and what it would do with it,
    and changes nothing. ``seconds`` bounds the run (above); None: no bound.
    """
    if connection.in_atomic_block:
        raise RuntimeError("REINDEX CONCURRENTLY cannot run inside a transaction: call reindex() outside atomic().")
    say = progress or (lambda line: None)
    ends_at = None if seconds is None else monotonic() + seconds
    tables = tables or retention.written_tables()
    report = ReindexReport(dry_run=dry_run)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [LOCK_KEY])
        if not cursor.fetchone()[0]:
            report.busy = True
            say(report.summary())
            return report
        try:
            tables = leaves(cursor, tables)
            _drop_leftovers(cursor, tables, report, dry_run=dry_run, say=say, ends_at=ends_at)
            for index in index_sizes(cursor, tables):
                if not index.bloated(min_waste=min_waste):
                    if dry_run:
                        say(f"keep {describe(index)}")
                    report.kept.append(index)
                    continue
                left = None if ends_at is None else ends_at - monotonic()
                if left is not None and left < 1:
                    report.left.append(index)
                    continue
                say(f"{'would rebuild' if dry_run else 'rebuilding'} {describe(index)}")
                if dry_run:
                    report.rebuilt.append((index, index.size))
                    continue
                try:
                    after = _rebuild(cursor, index.name, timeout=left)
                except OperationalError as error:
                    if getattr(error.__cause__, "sqlstate", None) != "57014":  # query_canceled
                        raise
                    say(f"{index.name}: not rebuilt within the time left; run manage.py reindex")
                    report.left.append(index)
                    _drop_leftovers(cursor, tables, report, dry_run=False, say=say, ends_at=ends_at)
                    continue
                say(f"rebuilt {index.name}: {_mb(after)} (was {_mb(index.size)})")
                report.rebuilt.append((index, after))
        finally:
            cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [LOCK_KEY])
    say(report.summary())
    return report


@contextmanager
def _limited(cursor, setting: str, seconds: float | None):
    """The session's ``setting`` (statement_timeout, lock_timeout) at ``seconds`` for the block,
    then its own again; no limit when None. Outside a transaction, so set for the session."""
    if seconds is None:
        yield
        return
    cursor.execute("SELECT set_config(%s, %s, false)", [setting, f"{int(seconds * 1000)}ms"])
    try:
        yield
    finally:
        cursor.execute(f"RESET {setting}")


def _rebuild(cursor, name: str, *, timeout: float | None) -> int:
    """Rebuild one index, within ``timeout`` seconds when given; its size after."""
    with _limited(cursor, "statement_timeout", timeout):
        cursor.execute(f"REINDEX INDEX CONCURRENTLY {connection.ops.quote_name(name)}")
    cursor.execute("SELECT pg_relation_size(%s::regclass)", [name])
    return cursor.fetchone()[0]


def _drop_leftovers(
    cursor, tables: list[str], report: ReindexReport, *, dry_run: bool, say, ends_at: float | None = None
) -> None:
    """Drop the INVALID leftovers of failed rebuilds. A run with a time limit waits for a leftover's
    table (held by a VACUUM, a migration, a rebuild) until the limit, a second at least, and leaves
    the leftover for the next run rather than outlast it."""
    for name in _invalid_leftovers(cursor, tables):
        say(f"{'would drop' if dry_run else 'dropping'} {name}: INVALID, left by a rebuild that failed")
        if dry_run:
            report.dropped.append(name)
            continue
        wait = None if ends_at is None else max(1.0, ends_at - monotonic())
        try:
            with _limited(cursor, "lock_timeout", wait):
                cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {connection.ops.quote_name(name)}")
        except OperationalError as error:
            if getattr(error.__cause__, "sqlstate", None) != "55P03":  # lock_not_available
                raise
            say(f"{name}: its table is held by another session; left for the next run")
            continue
        report.dropped.append(name)


def leaves(cursor, tables: list[str]) -> list[str]:
    """``tables`` with each partitioned one replaced by its partitions (the deliveries and attempts,
    by ranges of operations): their indexes hold the entries, the partitioned table's own holds none."""
    cursor.execute(
        # A table that is not partitioned has no tree: itself.
        "SELECT coalesce(p.relid::regclass::text, t.name) FROM unnest(%s::text[]) WITH ORDINALITY AS t(name, n) "
        "LEFT JOIN LATERAL pg_partition_tree(t.name::regclass) AS p ON true WHERE p.relid IS NULL OR p.isleaf "
        "ORDER BY t.n, p.relid",
        [tables],
    )
    return [name for (name,) in cursor.fetchall()]


def index_sizes(cursor, tables: list[str]) -> list[IndexSize]:
    """Every valid B-tree index of ``tables``, its size, its entries and the size the rule expects."""
    cursor.execute(
        """
        SELECT i.relname, t.relname, pg_relation_size(i.oid), greatest(i.reltuples, 0)::bigint,
               -- Each column's width: an expression's is in pg_stats under the index's name.
               (SELECT coalesce(sum(coalesce(si.avg_width, st.avg_width, %(unknown)s)), 0)
                  FROM generate_series(1, x.indnatts) AS k(n)
                  JOIN pg_attribute ia ON ia.attrelid = i.oid AND ia.attnum = k.n
                  LEFT JOIN pg_attribute ta ON ta.attrelid = t.oid AND ta.attnum = x.indkey[k.n - 1]
                  LEFT JOIN pg_stats si ON si.schemaname = n.nspname AND si.tablename = i.relname
                                       AND si.attname = ia.attname
                  LEFT JOIN pg_stats st ON st.schemaname = n.nspname AND st.tablename = t.relname
                                       AND st.attname = ta.attname)
          FROM pg_index x
          JOIN pg_class i ON i.oid = x.indexrelid
          JOIN pg_am am ON am.oid = i.relam
          JOIN pg_class t ON t.oid = x.indrelid
          JOIN pg_namespace n ON n.oid = t.relnamespace
         WHERE t.relname = ANY(%(tables)s) AND n.nspname = current_schema() AND x.indisvalid
           AND am.amname = 'btree'
         ORDER BY t.relname, i.relname
        """,
        {"tables": tables, "unknown": UNKNOWN_WIDTH},
    )
    return [
        IndexSize(name=name, table=table, size=size, entries=entries, expected=_expected(entries, width))
        for name, table, size, entries, width in cursor.fetchall()
    ]


def _expected(entries: int, width: int) -> int:
    entry = 4 + -(-(8 + int(width)) // 8) * 8  # a line pointer, then the tuple header and key 8-byte aligned
    return int(entries * entry / LEAF_FILL) + 2 * 8192  # and a metapage and a root


def _invalid_leftovers(cursor, tables: list[str]) -> list[str]:
    cursor.execute(
        """
        SELECT i.relname
          FROM pg_index x
          JOIN pg_class i ON i.oid = x.indexrelid
          JOIN pg_class t ON t.oid = x.indrelid
          JOIN pg_namespace n ON n.oid = t.relnamespace
         WHERE t.relname = ANY(%s) AND n.nspname = current_schema() AND NOT x.indisvalid
           AND i.relname ~ '_cc(new|old)[0-9]*$'
         ORDER BY i.relname
        """,
        [tables],
    )
    return [name for (name,) in cursor.fetchall()]


def _mb(size: int) -> str:
    return f"{size / 1024 / 1024:.1f} MB"


def describe(index: IndexSize) -> str:
    return f"{index.name} ({index.table}): {_mb(index.size)}, {index.entries} entries need about {_mb(index.expected)}"
