"""Behind a large backlog, the reads that look at it (the age of the oldest due operation, the
service levels) read a range of an index, not the backlog (migration 0026): whatever the planner's
statistics say, their plans name the index and sort nothing."""

import json

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from ledger.core.selectors import oldest_due_seconds, read_in_index_order, service_level_standing
from ledger.models import Operation
from tests.ledger.conftest import submit_brief

FINISHED = 20_000
BACKLOG = 5_000


@pytest.fixture(params=["none", "analysed"])
def backlog(request, workspace):
    """FINISHED succeeded operations, then BACKLOG pending ones, copied from a real one with SQL."""
    template = submit_brief(workspace, request_id="TEMPLATE")
    columns = [field.column for field in Operation._meta.concrete_fields if field.column not in ("id", "key", "state")]
    listed = ", ".join(columns)
    with connection.cursor() as cursor:
        for state, count in (("succeeded", FINISHED), ("pending", BACKLOG)):
            cursor.execute(
                f"INSERT INTO ledger_operation (key, state, {listed}) "
                f"SELECT %s || g, %s, {listed} FROM ledger_operation, generate_series(1, %s) AS g WHERE id = %s",
                [f"{state}-", state, count, template.pk],
            )
        if request.param == "analysed":
            cursor.execute("ANALYZE ledger_operation")
        else:
            forget_statistics(cursor, "ledger_operation")
    return template


def forget_statistics(cursor, table: str) -> None:
    """``table`` as never analysed, in this test's transaction only (rolled back after it): the
    statistics an earlier test's committed rows left (autovacuum analyses them on a server where it is
    on, as the embedded one) are not this test's "none"."""
    cursor.execute("DELETE FROM pg_statistic WHERE starelid = %s::regclass", [table])
    cursor.execute("UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE oid = %s::regclass", [table])


def plans_of(read) -> list[str]:
    """The plans of the backlog reads of ``read()``, as planned where they ran: after the setting
    ``read_in_index_order`` makes (checked here), and under it."""
    with CaptureQueriesContext(connection) as queries:
        read()
    statements = [query["sql"] for query in queries.captured_queries]
    reads = [sql for sql in statements if '"ledger_operation"' in sql]  # not the pause switches
    setting = statements.index("SET LOCAL enable_sort = off")
    assert setting < statements.index(reads[0])
    assert statements.index(reads[-1]) < statements.index("SET LOCAL enable_sort TO DEFAULT")
    plans = []
    with transaction.atomic(), read_in_index_order(), connection.cursor() as cursor:
        for sql in reads:
            cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}")
            plans.append(json.dumps(cursor.fetchone()[0]))
    return plans


def test_the_oldest_due_operation_is_read_from_the_start_of_the_claim_index(backlog):
    assert oldest_due_seconds() is not None

    [plan] = plans_of(oldest_due_seconds)

    assert "operation_claim_order_idx" in plan
    assert '"Node Type": "Sort"' not in plan


def test_the_service_levels_read_ranges_of_the_unfinished_index(backlog):
    levels, listed = service_level_standing(Operation.objects.all())
    assert {level.action: level.late for level in levels}["prepare-brief"] == 0  # just arrived

    plans = plans_of(lambda: service_level_standing(Operation.objects.all()))

    assert plans
    assert all("operation_unfinished_idx" in plan for plan in plans)
    assert not [plan for plan in plans if '"Node Type": "Sort"' in plan]


def test_the_oldest_due_per_action_is_the_first_due_entry_of_its_range(backlog):
    from ledger.core.selectors import due_operations, oldest_due_by_action

    def read():
        return oldest_due_by_action(due_operations(), ["prepare-brief", "send-notice"])

    assert read() == {"prepare-brief": backlog.created_at}  # the copies arrived with it; send-notice has none

    [plan] = plans_of(read)

    assert plan.count('"Index Name": "operation_due_since_idx"') == 2  # one range per action
    assert '"Node Type": "Sort"' not in plan
