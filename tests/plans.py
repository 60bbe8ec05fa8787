"""Plan tests: whether an index can answer a query, not which index is cheapest on a test's few rows."""

from django.db import connection


def only_index(table: str, index: str) -> None:
    """``table``'s indexes dropped but ``index`` and those of its constraints, in the test's
    transaction (rolled back after it): on a table this small the planner takes whichever index
    answers as well, and the question is whether this one can answer."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indexrelid::regclass::text FROM pg_index i "
            "LEFT JOIN pg_constraint c ON c.conindid = i.indexrelid "
            "WHERE i.indrelid = %s::regclass AND c.oid IS NULL AND i.indexrelid::regclass::text <> %s",
            [table, index],
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f"DROP INDEX {name}")
