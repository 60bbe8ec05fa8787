"""A failed commit strands nothing: when the database connection is lost while a worker records an
outcome, the operation in memory does not drift from the database, the outcome is written again on
a fresh connection, and the rest of the claimed batch goes on.

The fault is real: PostgreSQL terminates the worker's own connection (``pg_terminate_backend``)
inside the transaction that records the outcome (``ledger.engine.faults``), so these run on PostgreSQL
only; in the real worker cluster the same is shown by tests/faults/test_lost_connection.py.
"""

import pytest

from ledger.engine import faults
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_batch
from ledger.models import AuditEvent, Operation
from tests.conftest import external_event
from tests.faults.qcluster import assert_each_performed_exactly_once
from tests.ledger.conftest import submit_brief

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def lost_connection(monkeypatch, tmp_path):
    """The next outcome transaction loses its connection before it commits (once, or every time)."""
    monkeypatch.setenv("OPSCONSOLE_TERMINATE_AT", faults.TERMINATE_POINTS[0])

    def arm(*, once: bool = True):
        marker = tmp_path / "terminated"
        if once:
            monkeypatch.setenv("OPSCONSOLE_CRASH_ONCE_FILE", str(marker))
        return marker

    return arm


def test_it_writes_an_internal_outcome_again_after_its_commit_was_lost(workspace, lost_connection):
    marker = lost_connection()
    ids = [submit_brief(workspace, request_id=f"R-{n}").pk for n in range(3)]

    assert process_due_operations(worker="w1") == 3

    assert marker.exists(), "no outcome transaction lost its connection"
    assert_each_performed_exactly_once(ids)
    assert not AuditEvent.objects.filter(kind__in=["stale_completion_refused", "retry_scheduled"]).exists()
    assert AuditEvent.objects.filter(kind="succeeded").count() == 3


def test_it_writes_an_external_success_again_so_the_destination_acts_once(workspace, standin, lost_connection):
    marker = lost_connection()
    events = [external_event("send-notice", delivery_id=f"d-{n}", request_id=f"R-{n}") for n in range(3)]
    ids = [result.operation.pk for result in submit_batch(workspace=workspace, raw_events=events, source="api")]

    assert process_due_operations(worker="w1") == 3

    assert marker.exists()
    operations = Operation.objects.filter(pk__in=ids)
    assert {operation.state for operation in operations} == {"succeeded"}
    assert sorted(op.external_id for op in operations) == sorted(r["id"] for r in standin.records())
    assert standin.requests("POST /records") == 3


def test_it_goes_on_with_the_batch_when_every_outcome_commit_fails(workspace, lost_connection):
    """Even a connection lost at every outcome leaves no claim to wait out its lease: each operation
    is recorded as a transient failure on a fresh connection, and runs again once due."""
    lost_connection(once=False)
    ids = [submit_brief(workspace, request_id=f"R-{n}").pk for n in range(3)]

    assert process_due_operations(worker="w1") == 3

    operations = list(Operation.objects.filter(pk__in=ids))
    assert {(op.state, op.last_error_category, op.lease_owner) for op in operations} == {("retrying", "transient", "")}
    assert all("OperationalError" in op.last_error_message for op in operations)
