"""A request's reservation outside any transaction is one of its own in two round trips (BEGIN with
the call, the sealed audit events with the COMMIT: ledger.intake.reservation). What fails in
between leaves nothing written and no transaction open, and the next request goes through."""

import psycopg
import pytest
from django.db import IntegrityError, connection

from ledger.core import audit_chain, audit_verify
from ledger.intake import submit
from ledger.models import AuditEvent, Delivery, Operation, Workspace
from tests.conftest import event

pytestmark = pytest.mark.django_db(transaction=True)


def transaction_status() -> int:
    return connection.connection.info.transaction_status


def written(workspace) -> tuple[int, int, int]:
    return (
        Operation.objects.filter(workspace=workspace).count(),
        Delivery.objects.filter(workspace=workspace).count(),
        AuditEvent.objects.filter(workspace=workspace, kind="reserved").count(),
    )


def test_it_writes_the_event_and_its_audit_event_in_two_round_trips(workspace):
    statements = []

    def count(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        result = submit.submit_event(workspace=workspace, raw=event("d-1", request_id="R-1"), source="api")

    assert result.outcome == "accepted"
    assert [sql.split("(")[0] for sql in statements if "ledger_reserve" in sql or "ledger_audit" in sql] == [
        "BEGIN; SELECT ledger_reserve_one",
        "SELECT ledger_audit_insert",
    ]
    assert [sql for sql in statements if "ledger_audit_insert" in sql][0].endswith("; COMMIT")
    assert written(workspace) == (1, 1, 1)
    assert transaction_status() == psycopg.pq.TransactionStatus.IDLE
    assert audit_verify.verify_chains().broken is None


def test_a_failure_between_the_round_trips_leaves_nothing_and_no_open_transaction(workspace, monkeypatch):
    def broken_sealing(previous, rows):
        raise RuntimeError("the worker died while sealing")

    monkeypatch.setattr(audit_chain, "sealed", broken_sealing)
    with pytest.raises(RuntimeError, match="died while sealing"):
        submit.submit_event(workspace=workspace, raw=event("d-1", request_id="R-1"), source="api")

    assert transaction_status() == psycopg.pq.TransactionStatus.IDLE
    assert written(workspace) == (0, 0, 0)
    monkeypatch.undo()
    assert submit.submit_event(workspace=workspace, raw=event("d-2", request_id="R-1"), source="api").outcome == (
        "accepted"
    )
    assert written(workspace) == (1, 1, 1)
    assert audit_verify.verify_chains().broken is None


def test_a_commit_that_fails_leaves_nothing_and_the_connection_serves_the_next_request(workspace):
    """A workspace deleted while its request was on the way: the deferred foreign keys fail at the
    COMMIT, sent with the audit events."""
    gone = Workspace(pk=10**9, slug="gone", approved_owners=[])
    with pytest.raises(IntegrityError):
        submit.submit_event(workspace=gone, raw=event("d-1", request_id="R-1"), source="api")

    assert transaction_status() == psycopg.pq.TransactionStatus.IDLE
    assert not Operation.objects.filter(workspace_id=gone.pk).exists()
    assert not AuditEvent.objects.filter(workspace_id=gone.pk).exists()
    assert submit.submit_event(workspace=workspace, raw=event("d-2", request_id="R-2"), source="api").outcome == (
        "accepted"
    )
    assert written(workspace) == (1, 1, 1)
