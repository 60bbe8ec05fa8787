"""Two qcluster processes draining the same ledger perform every operation exactly once.

Correctness comes from the database (SKIP LOCKED claims, fenced outcomes, the draft's one-to-one),
never from there being a single worker (docs/design.md section 8).
"""

import pytest
from django.db import transaction

from ledger.models import Attempt, Operation
from ledger.states import State
from tests.faults.qcluster import (
    assert_each_performed_exactly_once,
    operation_states,
    submit_prepare_briefs,
    wait_for,
)

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

OPERATIONS = 2000
# Small claims, one per task: 200 tasks through the shared queue rather than ten claims of 200 that
# one cluster's two warm workers can finish before the other cluster's first task has started.
SMALL_CLAIMS = {
    "OPSCONSOLE_CLAIM_BATCH": "10",
    "OPSCONSOLE_FINISH_IN_CLAIM_BATCH": "10",
    "OPSCONSOLE_PROCESS_SECONDS": "0",
}


def test_it_performs_each_operation_once_when_two_clusters_drain_together(workspace, start_cluster):
    """2,000 operations become pending at once (one commit) while two running clusters wait;
    both take part, and every operation gets exactly one draft and one ok Attempt."""
    clusters = start_cluster("a", wait=False, env=SMALL_CLAIMS), start_cluster("b", wait=False, env=SMALL_CLAIMS)
    for cluster in clusters:
        cluster.wait_running()
    with transaction.atomic():
        operation_ids = submit_prepare_briefs(workspace, OPERATIONS)

    wait_for(
        lambda: Operation.objects.filter(state=State.SUCCEEDED).count() == OPERATIONS,
        timeout=60,
        clusters=clusters,
        describe=lambda: f"states {operation_states()}",
        message=f"two clusters did not finish {OPERATIONS} operations",
    )

    assert_each_performed_exactly_once(operation_ids)
    # Without a crash nothing is claimed twice: SKIP LOCKED hands each row to one worker only.
    claims = Operation.objects.filter(pk__in=operation_ids).exclude(fencing_token=1).values_list("key", "fencing_token")
    assert not claims, f"operations claimed more than once: {list(claims[:10])}"
    assert Attempt.objects.count() == OPERATIONS
    workers = set(Attempt.objects.values_list("worker", flat=True))
    worker_pids = {int(name.rsplit(":", 1)[1]) for name in workers}
    for cluster in clusters:
        assert worker_pids & cluster.pids(), f"cluster {cluster.name} performed no operation"
