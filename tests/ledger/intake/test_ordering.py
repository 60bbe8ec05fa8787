"""Versions of one request under each ordering policy (ledger.intake.ordering): independent versions all
run, latest_wins supersedes or refuses older ones, in_order runs them one after the other and
sends a gap to review."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from ledger.core import policies
from ledger.engine.claiming import claim_due_operations
from ledger.engine.processing import process_due_operations
from ledger.intake import submit
from ledger.models import AuditEvent, Delivery, Operation, RequestStatus, ReviewDraft, Wakeup
from ledger.people import replays
from ledger.states import State
from ledger.sweep import sweep
from tests.conftest import R42
from tests.ledger.conftest import START


def status(version, value="in_review", request_id="R-7", delivery_id=None):
    return {
        "action": "update-status",
        "delivery_id": delivery_id or f"d-{version}",
        "data": {"request_id": request_id, "version": version, "status": value},
    }


def brief(version, request_id="R-42"):
    return {"action": "prepare-brief", "data": R42 | {"request_id": request_id, "version": version}}


def states(action="update-status") -> dict[int, str]:
    return dict(Operation.objects.filter(action=action).values_list("version", "state"))


# --- independent ----------------------------------------------------------------------------------


def test_prepare_brief_keeps_independent_versions_each_is_new_work(api):
    assert policies.policy_for(None, "prepare-brief").ordering == "independent"
    api.post("/api/v1/events", brief(3))
    api.post("/api/v1/events", brief(4))

    process_due_operations()

    assert ReviewDraft.objects.count() == 2
    assert set(Operation.objects.values_list("state", flat=True)) == {"succeeded"}
    assert set(Operation.objects.values_list("series", flat=True)) == {""}  # no series, no index entry


# --- latest_wins ----------------------------------------------------------------------------------


def test_a_newer_version_supersedes_an_older_one_that_has_not_run(api):
    api.post("/api/v1/events", status(1, "received"))
    response = api.post("/api/v1/events", status(2, "approved"))

    assert response.status_code == 201
    assert states() == {1: "superseded", 2: "pending"}
    superseded = AuditEvent.objects.get(kind="superseded")
    assert superseded.message == "superseded by version 2 (demo:R-7:v2:update-status) before it ran"
    assert (superseded.from_state, superseded.to_state) == ("pending", "superseded")

    process_due_operations()
    assert states() == {1: "superseded", 2: "succeeded"}
    assert RequestStatus.objects.get().status == "approved"


def test_an_older_version_after_a_newer_one_is_recorded_and_answered_stale(api):
    api.post("/api/v1/events", status(4, "closed"))

    response = api.post("/api/v1/events", status(3, "in_review"))

    assert response.status_code == 409
    body = response.json()
    assert (body["status"], body["reason"], body["key"]) == ("blocked", "stale", "demo:R-7:v3:update-status")
    assert body["errors"] == [
        {
            "field": "data.version",
            "message": "version 3 is older than version 4 of this "
            "request, which supersedes it (the action's ordering is latest_wins)",
        }
    ]
    assert states() == {4: "pending"}
    delivery = Delivery.objects.get(sender_delivery_id="d-3")
    assert (delivery.outcome, delivery.key, delivery.operation) == ("stale", "demo:R-7:v3:update-status", None)


def test_a_redelivery_of_a_superseded_version_is_a_duplicate(api):
    api.post("/api/v1/events", status(1))
    api.post("/api/v1/events", status(2))

    again = api.post("/api/v1/events", status(1, delivery_id="d-1-again"))

    assert (again.status_code, again.json()["operation"]["state"]) == (200, "superseded")


def test_other_requests_are_not_superseded(api):
    api.post("/api/v1/events", status(1, request_id="R-1"))
    api.post("/api/v1/events", status(2, request_id="R-2"))

    assert set(Operation.objects.values_list("state", flat=True)) == {"pending"}


def test_a_retrying_older_version_is_superseded_and_a_running_one_is_not(api):
    api.post("/api/v1/events", status(1))
    api.post("/api/v1/events", status(2, request_id="R-8"))
    Operation.objects.filter(version=1).update(
        state=State.RETRYING, attempts=1, next_attempt_at=timezone.now() + timedelta(minutes=5)
    )
    [claimed] = claim_due_operations(limit=1, worker="w")  # R-8 v2 is processing

    api.post("/api/v1/events", status(2))
    api.post("/api/v1/events", status(3, request_id="R-8"))

    assert Operation.objects.get(key="demo:R-7:v1:update-status").state == "superseded"
    assert Operation.objects.get(pk=claimed.pk).state == "processing"  # it runs; it has begun


def test_the_destination_keeps_the_newest_version_when_an_older_one_runs_late(api, workspace):
    api.post("/api/v1/events", status(3, "in_review"))
    RequestStatus.objects.create(workspace=workspace, request_id="R-7", status="closed", version=5)

    process_due_operations()

    operation = Operation.objects.get()
    assert RequestStatus.objects.get().status == "closed"
    assert operation.result["overtaken_by_version"] == 5


def test_a_batch_of_versions_is_decided_in_its_order(api):
    response = api.post("/api/v1/events/batch", {"events": [status(1), status(3), status(2)]})

    [first, third, second] = response.json()["results"]
    assert (first["status"], third["status"], second["reason"]) == ("accepted", "accepted", "stale")
    assert states() == {1: "superseded", 3: "pending"}


def test_latest_wins_supersedes_a_refund_awaiting_approval(api, workspace):
    policies.set_policy(workspace=workspace, action="issue-refund", actor="test", ordering="latest_wins")
    refund = {"request_id": "F-1", "customer_id": "C-9", "amount_cents": 2500, "currency": "EUR"}

    api.post("/api/v1/events", {"action": "issue-refund", "data": refund | {"version": 1}})
    api.post("/api/v1/events", {"action": "issue-refund", "data": refund | {"version": 2, "amount_cents": 2000}})

    assert states("issue-refund") == {1: "superseded", 2: "pending_approval"}


def test_the_policy_command_turns_latest_wins_on_for_a_workspace(api, workspace):
    call_command("policy", "set", "--workspace", "demo", "--action", "file-ticket", "--ordering", "latest_wins")
    ticket = {"request_id": "T-1", "summary": "printer", "owner": "ops"}

    api.post("/api/v1/events", {"action": "file-ticket", "data": ticket | {"version": 1}})
    api.post("/api/v1/events", {"action": "file-ticket", "data": ticket | {"version": 2}})

    assert states("file-ticket") == {1: "superseded", 2: "pending"}


# --- in_order -------------------------------------------------------------------------------------


@pytest.fixture
def in_order(workspace):
    policies.set_policy(workspace=workspace, action="prepare-brief", actor="test", ordering="in_order")


def test_a_later_version_waits_for_the_earlier_one_to_finish(api, in_order):
    api.post("/api/v1/events", brief(2))
    assert process_due_operations() == 0  # version 2 waits: version 1 has not come

    api.post("/api/v1/events", brief(1))
    process_due_operations()
    assert states("prepare-brief") == {1: "succeeded", 2: "pending"}
    assert Wakeup.objects.filter(name="process").exists()  # its successor's wake-up

    process_due_operations()
    assert states("prepare-brief") == {1: "succeeded", 2: "succeeded"}
    first, second = ReviewDraft.objects.order_by("pk")
    assert (first.operation.version, second.operation.version) == (1, 2)


def test_a_version_waits_while_its_predecessor_needs_review(api, in_order):
    api.post("/api/v1/events", brief(1))
    api.post("/api/v1/events", brief(2))
    Operation.objects.filter(version=1).update(state=State.NEEDS_REVIEW)

    assert process_due_operations() == 0


def test_a_gap_goes_to_review_after_the_gap_wait_naming_the_missing_version(api, in_order, frozen, reviewer):
    api.post("/api/v1/events", brief(1))
    process_due_operations()
    api.post("/api/v1/events", brief(3))
    wait = policies.policy_for(None, "prepare-brief").gap_wait

    frozen.move_to(START + wait - timedelta(seconds=1), tick=False)
    sweep()
    assert states("prepare-brief")[3] == "pending"

    frozen.move_to(START + wait + timedelta(seconds=1), tick=False)
    assert sweep().versions_missing == 1
    gapped = Operation.objects.get(version=3)
    assert (gapped.state, gapped.last_error_category) == ("needs_review", "gap")
    assert AuditEvent.objects.get(kind="version_missing").message == (
        "version 2 of this request did not arrive within 10m"
    )

    replays.replay_operation(gapped, user=reviewer, reason="version 2 was never sent")
    assert "runs without waiting for version 2" in AuditEvent.objects.filter(kind="replayed").get().message
    process_due_operations()
    assert states("prepare-brief") == {1: "succeeded", 3: "succeeded"}


def test_versions_reserved_before_a_policy_change_keep_their_ordering(api, workspace):
    api.post("/api/v1/events", brief(2))  # independent when it came
    policies.set_policy(workspace=workspace, action="prepare-brief", actor="test", ordering="in_order")
    api.post("/api/v1/events", brief(4))

    process_due_operations()

    assert dict(Operation.objects.values_list("key", "state")) == {
        "demo:R-42:v2:prepare-brief": "succeeded",
        "demo:R-42:v4:prepare-brief": "pending",
    }  # 4 waits for 3


def test_intake_answers_each_version_as_the_submitter_sees_it(workspace):
    result = submit.submit_event(workspace=workspace, raw=status(2), source="cli")
    stale = submit.submit_event(workspace=workspace, raw=status(1), source="cli")

    assert (result.outcome, result.http_status, stale.outcome, stale.http_status) == ("accepted", 201, "stale", 409)
    assert stale.reason == "stale"
