"""A claim reads the oldest claimable operations along operation_claim_order_idx, whatever the planner's
statistics say: it sorts no backlog and walks no finished operation, so its cost is the batch's
however long the backlog and however many operations finished before it (migrations 0025 and 0026)."""

import json

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from ledger.core.selectors import read_in_index_order
from ledger.engine.claiming import claim_due_operations
from ledger.models import Operation
from ledger.states import State
from tests.ledger.conftest import submit_brief, succeeded_briefs

FINISHED = 400
BACKLOG = 60


def finished_then_a_backlog(workspace):
    """FINISHED succeeded operations, older (lower ids) than BACKLOG pending ones."""
    succeeded_briefs(workspace, (f"done-{n}" for n in range(FINISHED)))
    for n in range(BACKLOG):
        submit_brief(workspace, request_id=f"R-{n}")


def claim_plan(statement: str) -> str:
    with transaction.atomic(), read_in_index_order(), connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {statement}")
        return json.dumps(cursor.fetchone()[0])


def claim_statement(limit: int) -> str:
    with CaptureQueriesContext(connection) as queries:
        claimed = claim_due_operations(limit=limit, worker="w1")
    assert len(claimed) == limit
    [statement] = [q["sql"] for q in queries.captured_queries if "SKIP LOCKED" in q["sql"]]
    return statement


@pytest.mark.parametrize("statistics", ["none", "analysed"])
def test_a_claim_reads_the_claim_index_and_sorts_nothing(workspace, statistics):
    finished_then_a_backlog(workspace)
    if statistics == "analysed":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE ledger_operation")

    plan = claim_plan(claim_statement(limit=20))

    assert "operation_claim_order_idx" in plan
    assert '"Node Type": "Sort"' not in plan


def test_the_claim_takes_the_oldest_due_operations_first(workspace):
    finished_then_a_backlog(workspace)
    backlog = list(Operation.objects.filter(state=State.PENDING).order_by("id").values_list("id", flat=True))

    first = claim_due_operations(limit=20, worker="w1")
    second = claim_due_operations(limit=20, worker="w2")

    assert [operation.pk for operation in first + second] == backlog[:40]


def test_the_claim_leaves_its_transaction_planning_as_before(workspace):
    submit_brief(workspace)
    with transaction.atomic(), connection.cursor() as cursor:  # a caller's transaction around the claim
        claim_due_operations(limit=5, worker="w1")
        cursor.execute("SHOW enable_sort")
        assert cursor.fetchone()[0] == "on"


def test_a_claim_that_fails_leaves_the_planning_as_before_too(workspace, monkeypatch):
    """The claim's statement raises (here a division by zero in its WHERE): its savepoint rolls back,
    and with it the planner setting; the caller's transaction goes on as it was."""
    from django.db import DataError

    from ledger.engine import claiming

    submit_brief(workspace)
    monkeypatch.setattr(claiming, "due_operations", lambda now: Operation.objects.extra(where=["1 / 0 = 1"]))
    with transaction.atomic(), connection.cursor() as cursor:
        with pytest.raises(DataError):
            claim_due_operations(limit=5, worker="w1")
        cursor.execute("SHOW enable_sort")
        assert cursor.fetchone()[0] == "on"
    assert Operation.objects.get().state == State.PENDING
