"""The foreign keys that have no index of their own (migration 0057) are read by nothing that would need
one, and the one path that reads ``delivery.person_id``, a person's deletion, still finds it through
the partial ``delivery_person_idx``. The same paths at 1,000,000 deliveries: docs/performance.md."""

from django.contrib.auth.models import User
from django.db import connection
from django.db.models.deletion import Collector
from django.test.utils import CaptureQueriesContext

from ledger.models import Attempt, AuditEvent, Delivery

# What PostgreSQL runs for the foreign key when a referenced row is deleted (ri_triggers.c), planned
# once per connection for any id: a generic plan. The deliveries are partitioned (by ranges of
# operations): the foreign key is each partition's, and so is the check.
FOREIGN_KEY_CHECK = 'SELECT 1 FROM ONLY "{table}" x WHERE "person_id" OPERATOR(pg_catalog.=) $1 FOR KEY SHARE OF x'

# Each partition of the deliveries and its part of delivery_person_idx.
PERSON_INDEXES = """
SELECT x.indrelid::regclass::text, x.indexrelid::regclass::text FROM pg_inherits i
JOIN pg_index x ON x.indexrelid = i.inhrelid WHERE i.inhparent = 'delivery_person_idx'::regclass
"""


def _plans(cursor, statements: list[str]) -> list[str]:
    cursor.execute("SET LOCAL enable_seqscan = off")  # a table this small is read whole otherwise
    plans = []
    for sql in statements:
        cursor.execute("EXPLAIN " + sql)
        plans.append("\n".join(row[0] for row in cursor.fetchall()))
    return plans


def test_a_persons_deletion_reads_their_deliveries_through_the_partial_index(db):
    leaver = User.objects.create_user("leaver")
    with CaptureQueriesContext(connection) as context:
        Collector(using="default", origin=leaver).collect([leaver])
    protect_checks = [query["sql"] for query in context.captured_queries if '"ledger_delivery"' in query["sql"]]

    with connection.cursor() as cursor:
        cursor.execute(PERSON_INDEXES)
        partitions = dict(cursor.fetchall())
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        [protect_plan] = _plans(cursor, protect_checks)
        check_plans = {}
        for number, (partition, index) in enumerate(partitions.items()):
            cursor.execute(f"PREPARE person_check_{number}(integer) AS {FOREIGN_KEY_CHECK.format(table=partition)}")
            [check_plans[index]] = _plans(cursor, [f"EXECUTE person_check_{number}({leaver.pk})"])
            cursor.execute(f"DEALLOCATE person_check_{number}")

    assert len(protect_checks) == 1  # Django's PROTECT check: person_id IN (..)
    assert {"ledger_delivery_history", "ledger_delivery_default"} <= set(partitions)
    for index in partitions.values():
        assert index in protect_plan, protect_plan
    for index, plan in check_plans.items():
        assert index in plan, plan


def test_deliveries_without_a_person_are_not_in_its_index(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'delivery_person_idx'")
        (definition,) = cursor.fetchone()

    assert definition.endswith("WHERE (person_id IS NOT NULL)")


def test_the_delivery_workspace_and_the_audit_events_attempt_have_no_index(db):
    with connection.cursor() as cursor:
        indexed = {
            (table, column)
            for table in (Delivery._meta.db_table, AuditEvent._meta.db_table)
            for (column,) in _single_column_indexes(cursor, table)
        }

    assert ("ledger_delivery", "workspace_id") not in indexed
    assert ("ledger_delivery", "person_id") not in indexed  # only the partial one
    assert ("ledger_auditevent", "attempt_id") not in indexed


def _single_column_indexes(cursor, table: str) -> list[tuple[str]]:
    cursor.execute(
        """
        SELECT a.attname FROM pg_index i
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
        WHERE i.indrelid = %s::regclass AND i.indnatts = 1 AND i.indpred IS NULL""",
        [table],
    )
    return cursor.fetchall()


def test_deleting_attempts_never_reads_audit_events_by_attempt(db):
    """Retention deletes attempts (ledger.retention); their events stay. No constraint makes
    PostgreSQL look for them, and DO_NOTHING keeps Django's collector away."""
    with CaptureQueriesContext(connection) as context:
        Collector(using="default", origin=None).collect([Attempt(pk=10**9)])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_constraint WHERE conrelid = 'ledger_auditevent'::regclass "
            "AND confrelid = 'ledger_attempt'::regclass"
        )
        (constraints,) = cursor.fetchone()

    assert constraints == 0
    assert not [query for query in context.captured_queries if "ledger_auditevent" in query["sql"]]
