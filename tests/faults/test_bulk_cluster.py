"""A bulk replay run to its end by a real worker cluster on PostgreSQL: 60 notices refused by the
destination with HTTP 400, one bulk replay of their failure group pressed in the console (twice),
and the cluster's task replays each in chunks, then its workers send each again, once."""

import pytest

from ledger.intake import submit
from ledger.models import AuditEvent, BulkAction, Operation
from ledger.reads.failure_groups import failure_groups
from ledger.states import State
from tests.faults.qcluster import operation_states, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

COUNT = 60


def test_a_cluster_runs_a_bulk_replay_to_the_end(workspace, standin, start_cluster, settings, client, reviewer):
    # The worker runs under this process's configuration (ledger.core.configuration), so that the replays
    # made from here find nothing changed since the operations last ran.
    timeout = str(settings.OPSCONSOLE_HTTP_TIMEOUT_SECONDS)
    cluster = start_cluster(
        "worker", env={"OPSCONSOLE_STANDIN_URL": standin.url, "OPSCONSOLE_HTTP_TIMEOUT_SECONDS": timeout}
    )
    standin.fail_next(*[{"kind": "status", "status": 400}] * COUNT)
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
        lambda: operation_states(ids) == {State.NEEDS_REVIEW: COUNT},
        timeout=60,
        clusters=(cluster,),
        message="the refused notices did not all need review",
        describe=lambda: str(operation_states(ids)),
    )
    [group], _ = failure_groups(Operation.objects.all())
    assert group.count == COUNT
    assert group.message == "HTTP 400 from <ip> [injected_fault]: …"

    client.force_login(reviewer)
    form = {"group": str(group.criterion), "token": "one-press", "kind": "replay", "reason": "the 400 is fixed"}
    first = client.post("/console/bulk/", form)
    second = client.post("/console/bulk/", form)  # people click twice
    assert first.url == second.url

    bulk = BulkAction.objects.get()
    wait_for(
        lambda: BulkAction.objects.filter(pk=bulk.pk, status="finished").exists(),
        timeout=90,
        clusters=(cluster,),
        message="the bulk action did not finish",
        describe=lambda: str(BulkAction.objects.values("status", "done", "skipped", "failed").get()),
    )
    wait_for(
        lambda: operation_states(ids) == {State.SUCCEEDED: COUNT},
        timeout=90,
        clusters=(cluster,),
        message="the replayed notices were not all sent",
        describe=lambda: str(operation_states(ids)),
    )

    bulk.refresh_from_db()
    assert (bulk.done, bulk.skipped, bulk.failed) == (COUNT, 0, 0)
    replayed = AuditEvent.objects.filter(kind="replayed", actor="operator")
    assert sorted(replayed.values_list("operation_id", flat=True)) == sorted(ids)
    assert standin.requests("POST /records") == 2 * COUNT  # refused once, sent once
    assert len(standin.records()) == COUNT
