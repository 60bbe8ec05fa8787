"""A worker killed after the destination acted but before the outcome was recorded: the
operation becomes unknown, reconciliation finds the record, and nothing is sent twice.

Real processes: a ``qcluster`` calls the stand-in destination over HTTP (served from this test
process), its worker SIGKILLs itself at ``after_external_call`` (``ledger.engine.faults``).

The crashing cluster runs one worker, so exactly one try is in flight when it dies: with two, the
second worker could claim part of the batch (SKIP LOCKED splits it) and begin a try of its own
before the cluster is killed, and which operations end up unknown would depend on timing.
"""

from datetime import timedelta

import pytest

from ledger.engine import faults
from ledger.intake.submit import submit_batch
from ledger.models import Operation
from ledger.states import State
from ledger.sweep import sweep
from reconciliation.reconcile import reconcile_unknown_operations
from tests.conftest import external_event
from tests.faults.qcluster import operation_states, wait_for, wait_for_other_sessions_to_end

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

OPERATIONS = 10


@pytest.mark.parametrize("action", ["send-notice", "file-ticket"])
def test_it_reconciles_a_crash_after_the_destination_acted(action, workspace, standin, start_cluster, tmp_path):
    events = [external_event(action, delivery_id=f"d-{n}", request_id=f"R-{n}") for n in range(OPERATIONS)]
    operation_ids = [
        result.operation.pk for result in submit_batch(workspace=workspace, raw_events=events, source="api")
    ]
    marker = tmp_path / "crashed"
    destination = {"OPSCONSOLE_STANDIN_URL": standin.url}
    crashing = start_cluster(
        "crashing",
        env=destination
        | {
            "Q_WORKERS": "1",  # one try in flight at the crash, whatever the timing
            "OPSCONSOLE_CRASH_AT": faults.EXTERNAL_POINTS[0],
            "OPSCONSOLE_CRASH_ONCE_FILE": str(marker),
        },
    )

    wait_for(marker.exists, timeout=30, clusters=(crashing,), message="no worker reached the crash point")
    crashing.kill()
    wait_for_other_sessions_to_end()

    [acted_unrecorded] = [
        record
        for record in standin.records()
        if Operation.objects.get(key=record["reference"]).state == State.PROCESSING
    ]
    lease_ends = max(Operation.objects.filter(state=State.PROCESSING).values_list("lease_expires_at", flat=True))
    sweep(now=lease_ends + timedelta(seconds=1))
    # The one try that reached the destination is unknown; the others never began one: back to pending.
    assert operation_states(operation_ids) == {"unknown": 1, "pending": OPERATIONS - 1}
    unknown = Operation.objects.get(state=State.UNKNOWN)
    assert unknown.key == acted_unrecorded["reference"]

    report = reconcile_unknown_operations(now=lease_ends + timedelta(minutes=5))
    assert report.found == 1
    restarted = start_cluster("restarted", env=destination)
    wait_for(
        lambda: operation_states(operation_ids) == {"succeeded": OPERATIONS},
        timeout=60,
        clusters=(restarted,),
        describe=lambda: f"states {operation_states(operation_ids)}",
        message="the restarted cluster did not finish the external operations",
    )

    records = standin.records()
    assert sorted(r["reference"] for r in records) == sorted(Operation.objects.values_list("key", flat=True))
    assert Operation.objects.get(pk=unknown.pk).external_id == acted_unrecorded["id"]
    assert standin.requests() == OPERATIONS  # nothing was sent twice
