"""A worker killed with SIGKILL at any crash point loses no operation and performs none twice.

Real processes on PostgreSQL: a ``qcluster`` runs with ``OPSCONSOLE_CRASH_AT=<point>`` (see
``ledger.engine.faults``); the first worker to reach the point kills itself; the test then SIGKILLs the
whole cluster, lets the sweep find the expired leases, starts a clean cluster and checks the
outcome from the database alone.
"""

from datetime import timedelta

import pytest

from ledger import sweep
from ledger.engine import destination_health, faults
from ledger.models import Attempt, Operation, ReviewDraft
from ledger.states import State
from tests.faults.qcluster import (
    assert_each_performed_exactly_once,
    operation_states,
    submit_prepare_briefs,
    wait_for,
    wait_for_other_sessions_to_end,
)

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

OPERATIONS = 30


def all_succeeded(operation_ids):
    return lambda: Operation.objects.filter(pk__in=operation_ids, state=State.SUCCEEDED).count() == len(operation_ids)


@pytest.mark.parametrize("point", faults.POINTS)
def test_it_loses_no_operation_and_repeats_none_when_a_worker_is_killed(point, workspace, start_cluster, tmp_path):
    """The dead worker's claims stay in processing until their lease expires; the sweep then puts
    them back to pending and a restarted cluster finishes everything, each effect exactly once."""
    operation_ids = submit_prepare_briefs(workspace, OPERATIONS)
    marker = tmp_path / "crashed"
    crashing = start_cluster("crashing", env={"OPSCONSOLE_CRASH_AT": point, "OPSCONSOLE_CRASH_ONCE_FILE": str(marker)})

    wait_for(marker.exists, timeout=30, clusters=(crashing,), message=f"no worker reached the crash point {point}")
    crashing.kill()
    wait_for_other_sessions_to_end()

    stranded = Operation.objects.filter(state=State.PROCESSING)
    stranded_ids = sorted(stranded.values_list("pk", flat=True))
    assert stranded_ids, f"the crash at {point} left no claimed operation behind"
    lease_ends = max(stranded.values_list("lease_expires_at", flat=True))
    assert not sweep.sweep(now=lease_ends - timedelta(seconds=1)).leases_expired, (
        "the sweep took back a claim whose lease still held"
    )

    report = sweep.sweep(now=lease_ends + timedelta(seconds=1))

    assert report.leases_expired == len(stranded_ids)
    assert (
        sorted(Operation.objects.filter(pk__in=stranded_ids, state=State.PENDING).values_list("pk", flat=True))
        == stranded_ids
    )
    restarted = start_cluster("restarted")
    wait_for(
        all_succeeded(operation_ids),
        timeout=60,
        clusters=(restarted,),
        describe=lambda: f"states {operation_states(operation_ids)}",
        message=f"the restarted cluster did not finish the {OPERATIONS} operations",
    )
    assert_each_performed_exactly_once(operation_ids)


def test_a_worker_killed_inside_a_claim_that_finishes_its_set_leaves_nothing_and_nothing_to_wait_for(
    workspace, start_cluster, tmp_path
):
    """prepare-brief is known to work, so a batch's effects, claims and ``succeeded`` commit in the
    claim's transaction (``ledger.engine.claiming.finish_in_claim``). A worker killed inside it takes the
    whole transaction with it: no operation is left in processing (no lease to wait out), no draft
    and no attempt stays; the sweep finds them due at once (the task that was running is lost with
    the worker) and a restarted cluster performs each operation once."""
    # as a batch that all succeeded notes
    destination_health.record(destination_health.health_of("action:prepare-brief"), ok=True)
    operation_ids = submit_prepare_briefs(workspace, OPERATIONS)
    marker = tmp_path / "crashed"
    crashing = start_cluster(
        "crashing", env={"OPSCONSOLE_CRASH_AT": faults.IN_CLAIM_POINTS[0], "OPSCONSOLE_CRASH_ONCE_FILE": str(marker)}
    )

    wait_for(marker.exists, timeout=30, clusters=(crashing,), message="no worker reached the point inside a claim")
    crashing.kill()
    wait_for_other_sessions_to_end()

    crashed_in = Operation.objects.filter(pk__in=operation_ids)
    assert not crashed_in.filter(state=State.PROCESSING).exists()
    assert not ReviewDraft.objects.filter(operation__in=crashed_in.exclude(state=State.SUCCEEDED)).exists()
    assert not Attempt.objects.filter(operation__in=crashed_in.exclude(state=State.SUCCEEDED)).exists()
    left = crashed_in.exclude(state=State.SUCCEEDED).count()
    assert left > 0, "the crash kept nothing back to redo"

    report = sweep.sweep()  # now: not after any lease

    assert (report.leases_expired, report.due) == (0, left)
    restarted = start_cluster("restarted")
    wait_for(
        all_succeeded(operation_ids),
        timeout=60,
        clusters=(restarted,),
        describe=lambda: f"states {operation_states(operation_ids)}",
        message=f"the restarted cluster did not finish the {OPERATIONS} operations",
    )
    assert_each_performed_exactly_once(operation_ids)
