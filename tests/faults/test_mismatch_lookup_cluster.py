"""A bulk lookup of the records the reconciliation audit found missing, run to its end by a real
worker cluster on PostgreSQL: 25 notices sent, 3 of their records deleted at the stand-in, the
audit's 3 missing_at_destination mismatches looked up from the console (pressed twice); the
cluster's task asks the stand-in about each by key and sends nothing."""

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from ledger.intake import submit
from ledger.models import Attempt, AuditEvent, BulkAction, BulkItem, Operation
from ledger.states import State
from reconciliation.models import Mismatch
from reconciliation.two_way_audit import run_audit
from tests.faults.qcluster import operation_states, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

COUNT = 25
LOST = 3


def test_a_cluster_looks_up_the_missing_records_and_sends_nothing(workspace, standin, start_cluster, client, reviewer):
    cluster = start_cluster("worker", env={"OPSCONSOLE_STANDIN_URL": standin.url})
    events = [
        {
            "action": "send-notice",
            "delivery_id": f"d-{n}",
            "data": {"request_id": f"R-{n}", "version": 1, "summary": f"Notice {n}", "owner": "ops"},
        }
        for n in range(COUNT)
    ]
    ids = [result.operation.pk for result in submit.submit_batch(workspace=workspace, raw_events=events, source="cli")]
    wait_for(
        lambda: operation_states(ids) == {State.SUCCEEDED: COUNT},
        timeout=60,
        clusters=(cluster,),
        message="the notices were not all sent",
        describe=lambda: str(operation_states(ids)),
    )
    # Test setup only: the tries started ten minutes ago, so no request can still be landing and
    # the cluster believes the stand-in's "absent".
    earlier = timezone.now() - timedelta(minutes=10)
    Attempt.objects.filter(operation_id__in=ids).update(started_at=earlier, finished_at=earlier)
    lost = list(Operation.objects.filter(pk__in=ids).order_by("id")[:LOST])
    for operation in lost:
        standin.http.post("/_delete", json={"id": operation.external_id}).raise_for_status()
    with time_machine.travel(timezone.now() + timedelta(minutes=2)):  # past the settle time: in the window
        run = run_audit(since=timezone.now() - timedelta(hours=1))
    assert (run.missing_at_destination, run.destination_reset) == (LOST, 0)  # a loss, not a reset
    sent = standin.requests("POST /records")

    client.force_login(reviewer)
    form = {
        "mismatch": list(Mismatch.objects.values_list("pk", flat=True)),
        "decision": "lookup",
        "token": "one-press",
        "reason": "",
    }
    first = client.post("/console/mismatches/decide/", form)
    second = client.post("/console/mismatches/decide/", form)  # people click twice
    assert first.url == second.url

    bulk = BulkAction.objects.get()
    wait_for(
        lambda: BulkAction.objects.filter(pk=bulk.pk, status="finished").exists(),
        timeout=60,
        clusters=(cluster,),
        message="the bulk lookup did not finish",
        describe=lambda: str(BulkAction.objects.values("status", "done", "skipped", "failed").get()),
    )
    bulk.refresh_from_db()
    assert (bulk.kind, bulk.done, bulk.skipped, bulk.failed) == ("lookup", LOST, 0, 0)
    assert set(BulkItem.objects.values_list("outcome", flat=True)) == {"absent"}
    assert standin.requests("POST /records") == sent  # nothing was sent again
    assert operation_states(ids) == {State.SUCCEEDED: COUNT}
    assert AuditEvent.objects.filter(kind="looked_up", actor="operator").count() == LOST
    assert set(Mismatch.objects.values_list("status", flat=True)) == {"open"}
