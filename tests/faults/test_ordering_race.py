"""latest_wins under a race: 16 versions of one request submitted at once, each from its own thread
and PostgreSQL connection, leave exactly one operation that runs (the highest version); every other
version is superseded (it came before) or stale (it came after)."""

import pytest

from ledger.engine.processing import process_due_operations
from ledger.models import Delivery, Operation, RequestStatus
from tests.faults.test_intake_races import submit_together

VERSIONS = 16


def status(version, request_id):
    return {
        "action": "update-status",
        "delivery_id": f"{request_id}-{version}",
        "data": {"request_id": request_id, "version": version, "status": "in_review" if version < 16 else "closed"},
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("round_", range(3))
def test_sixteen_concurrent_versions_leave_only_the_highest_to_run(workspace, round_):
    request_id = f"R-{round_}"
    outcomes, failures = submit_together(workspace, [status(v, request_id) for v in range(1, VERSIONS + 1)])

    assert failures == []
    assert sum(outcomes.values()) == VERSIONS
    assert set(outcomes) <= {"accepted", "stale"}
    states = dict(Operation.objects.filter(key__contains=f":{request_id}:").values_list("version", "state"))
    stale = set(Delivery.objects.filter(outcome="stale").values_list("sender_delivery_id", flat=True))
    assert states[VERSIONS] == "pending"
    assert {state for version, state in states.items() if version != VERSIONS} <= {"superseded"}
    # Every version is either an operation or a stale delivery, never both, never neither.
    assert set(states) | {int(d.rsplit("-", 1)[1]) for d in stale} == set(range(1, VERSIONS + 1))
    assert not set(states) & {int(d.rsplit("-", 1)[1]) for d in stale}
    assert outcomes["stale"] == len(stale)

    process_due_operations()

    ran = Operation.objects.filter(key__contains=f":{request_id}:", attempts__gt=0)
    assert list(ran.values_list("version", "state")) == [(VERSIONS, "succeeded")]
    assert RequestStatus.objects.get(request_id=request_id).status == "closed"
