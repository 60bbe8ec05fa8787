"""A worker killed while a pool's worth of calls is in flight: every try that was begun becomes
unknown and is reconciled (the destination acted on each), the tries that were still waiting for a
slot had begun nothing and simply run again, and nothing is sent twice.

Real processes: a ``qcluster`` with one worker calls the stand-in destination (served from this
test process). The batch's first call goes alone and answers; the next ``max_concurrency`` calls
go out together and the stand-in acts on each but holds its answer (a ``delay`` fault); while they
hang, the test SIGKILLs the cluster, as a power cut would.
"""

from datetime import timedelta

import pytest

from ledger.actions import get_action
from ledger.intake.submit import submit_batch
from ledger.models import Attempt, Operation
from ledger.states import State
from ledger.sweep import sweep
from reconciliation.reconcile import reconcile_unknown_operations
from tests.conftest import external_event
from tests.faults.qcluster import operation_states, wait_for, wait_for_other_sessions_to_end

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

WAITING_FOR_A_SLOT = 4


@pytest.mark.parametrize("action", ["send-notice", "file-ticket"])
def test_it_reconciles_every_call_in_flight_when_the_worker_dies(action, workspace, standin, start_cluster):
    in_flight = get_action(action).max_concurrency
    count = 1 + in_flight + WAITING_FOR_A_SLOT
    events = [external_event(action, delivery_id=f"d-{n}", request_id=f"R-{n}") for n in range(count)]
    standin.fail_next({"kind": "delay", "seconds": 0}, *[{"kind": "delay", "seconds": 60}] * in_flight)
    operation_ids = [
        result.operation.pk for result in submit_batch(workspace=workspace, raw_events=events, source="api")
    ]
    destination = {"OPSCONSOLE_STANDIN_URL": standin.url}
    # One claim takes them all: the first, a pool's worth in flight, and the ones waiting for a slot.
    crashing = start_cluster("crashing", env=destination | {"Q_WORKERS": "1", "OPSCONSOLE_CLAIM_BATCH": str(count)})

    wait_for(
        lambda: len(standin.records()) == 1 + in_flight,
        timeout=30,
        clusters=(crashing,),
        describe=lambda: f"{len(standin.records())} records, states {operation_states(operation_ids)}",
        message="the calls did not all reach the destination",
    )
    crashing.kill()
    wait_for_other_sessions_to_end()

    acted = {record["reference"] for record in standin.records()}
    assert operation_states(operation_ids) == {"succeeded": 1, "processing": count - 1}
    [answered] = Operation.objects.filter(state=State.SUCCEEDED).values_list("key", flat=True)
    unanswered = Attempt.objects.filter(finished_at__isnull=True).values_list("operation__key", flat=True)
    assert set(unanswered) == acted - {answered}
    # A try is begun just before its call leaves: those still waiting for a slot began none.
    assert Attempt.objects.count() == 1 + in_flight

    lease_ends = max(Operation.objects.filter(state=State.PROCESSING).values_list("lease_expires_at", flat=True))
    sweep(now=lease_ends + timedelta(seconds=1))
    assert operation_states(operation_ids) == {"succeeded": 1, "unknown": in_flight, "pending": WAITING_FOR_A_SLOT}
    report = reconcile_unknown_operations(now=lease_ends + timedelta(minutes=5))
    assert report.found == in_flight

    restarted = start_cluster("restarted", env=destination)
    wait_for(
        lambda: operation_states(operation_ids) == {"succeeded": count},
        timeout=60,
        clusters=(restarted,),
        describe=lambda: f"states {operation_states(operation_ids)}",
        message="the restarted cluster did not finish the external operations",
    )
    records = standin.records()
    assert sorted(r["reference"] for r in records) == sorted(Operation.objects.values_list("key", flat=True))
    assert sorted(r["id"] for r in records) == sorted(Operation.objects.values_list("external_id", flat=True))
    assert standin.requests("POST /records") == count  # nothing was sent twice
