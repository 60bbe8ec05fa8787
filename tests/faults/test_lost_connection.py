"""A worker whose database connection is terminated mid-batch strands nothing: every operation it
claimed finishes without waiting for its lease, and none is performed twice.

Real processes on PostgreSQL: a ``qcluster`` runs with ``OPSCONSOLE_TERMINATE_AT`` (see
``ledger.engine.faults``): the first worker to reach the point, inside the transaction that records an
outcome, has PostgreSQL terminate its own connection (``pg_terminate_backend``).
"""

import pytest

from ledger.engine import faults
from ledger.intake.submit import submit_batch
from ledger.models import AuditEvent, Operation
from ledger.states import State
from tests.conftest import external_event
from tests.faults.qcluster import assert_each_performed_exactly_once, operation_states, submit_prepare_briefs, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

OPERATIONS = 30
# Well inside the 60-second lease: finishing in time proves nothing waited for a lease to expire.
FINISH_WITHIN = 20


def terminating(tmp_path) -> tuple[dict, object]:
    marker = tmp_path / "terminated"
    return {"OPSCONSOLE_TERMINATE_AT": faults.TERMINATE_POINTS[0], "OPSCONSOLE_CRASH_ONCE_FILE": str(marker)}, marker


def test_it_finishes_every_claimed_internal_operation(workspace, start_cluster, tmp_path):
    env, marker = terminating(tmp_path)
    cluster = start_cluster("terminated", env=env | {"Q_WORKERS": "1"})  # one worker: one batch holds them all

    operation_ids = submit_prepare_briefs(workspace, OPERATIONS)

    wait_for(
        lambda: operation_states(operation_ids) == {"succeeded": OPERATIONS},
        timeout=FINISH_WITHIN,
        clusters=(cluster,),
        describe=lambda: f"states {operation_states(operation_ids)}",
        message="the claimed operations did not all finish",
    )
    assert marker.exists(), "no worker lost its connection"
    assert_each_performed_exactly_once(operation_ids)
    assert not AuditEvent.objects.filter(kind__in=["lease_expired", "stale_completion_refused"]).exists()
    assert "database connection lost recording the outcome" in cluster.log_text()


def test_it_finishes_every_claimed_external_operation_and_the_destination_acts_once(
    workspace, standin, start_cluster, tmp_path
):
    env, marker = terminating(tmp_path)
    cluster = start_cluster("terminated", env=env | {"Q_WORKERS": "1", "OPSCONSOLE_STANDIN_URL": standin.url})

    events = [external_event("send-notice", delivery_id=f"d-{n}", request_id=f"R-{n}") for n in range(10)]
    operation_ids = [
        result.operation.pk for result in submit_batch(workspace=workspace, raw_events=events, source="api")
    ]

    wait_for(
        lambda: operation_states(operation_ids) == {"succeeded": 10},
        timeout=FINISH_WITHIN,
        clusters=(cluster,),
        describe=lambda: f"states {operation_states(operation_ids)}",
        message="the claimed external operations did not all finish",
    )
    assert marker.exists(), "no worker lost its connection"
    records = standin.records()
    assert sorted(r["reference"] for r in records) == sorted(
        Operation.objects.filter(pk__in=operation_ids).values_list("key", flat=True)
    )
    assert standin.requests("POST /records") == 10  # nothing was sent twice
    assert not Operation.objects.filter(pk__in=operation_ids).exclude(state=State.SUCCEEDED).exists()
