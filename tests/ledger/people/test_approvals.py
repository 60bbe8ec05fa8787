"""A consequential operation runs only after a person with the approve permission, who did not
submit it, approved its exact payload."""

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django_q.models import OrmQ

from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import Approval, AuditEvent, Conflict, Operation
from ledger.people import conflict_decisions, replays, review
from ledger.people.approvals import ApprovalError, approve_operation, reject_operation

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def refund(workspace, submitted_by="token:oc_test", **data):
    result = submit_event(
        workspace=workspace,
        raw={"action": "issue-refund", "data": REFUND | data},
        source="api",
        submitted_by=submitted_by,
    )
    assert result.http_status in (200, 201, 409), result
    return result


@pytest.fixture
def corrector(person):
    """A second approver, who sees the amounts and so may apply a conflict in them (and then, four
    eyes, not approve it)."""
    return person("carol", "approver")


@pytest.fixture
def refund_waiting(workspace):
    operation = refund(workspace).operation
    assert operation.state == "pending_approval"
    return operation


def test_it_holds_a_consequential_operation_until_approved(refund_waiting, standin):
    assert process_due_operations() == 0
    assert standin.records() == []


def test_it_runs_the_operation_once_approved(refund_waiting, approver, standin, django_capture_on_commit_callbacks):
    OrmQ.objects.all().delete()  # intake's own wake-up
    with django_capture_on_commit_callbacks(execute=True):
        approval = approve_operation(refund_waiting, user=approver, note="customer called")

    assert (approval.decision, approval.approver, approval.fingerprint) == (
        "approved",
        "approver",
        refund_waiting.fingerprint,
    )
    assert Operation.objects.get().state == "pending"
    assert OrmQ.objects.count() == 1
    event = AuditEvent.objects.get(kind="approval_approved")
    assert (event.actor, event.from_state, event.to_state, event.message) == (
        "approver",
        "pending_approval",
        "pending",
        f"customer called (payload {refund_waiting.fingerprint})",  # the decision bound to its payload
    )

    process_due_operations()

    [record] = standin.records()
    assert record["payload"] == {"customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}
    assert Operation.objects.get().state == "succeeded"


def test_it_never_runs_a_rejected_operation(refund_waiting, approver, standin):
    reject_operation(refund_waiting, user=approver, note="duplicate of R-6")

    assert Operation.objects.get().state == "rejected"
    assert Approval.objects.get().decision == "rejected"
    assert process_due_operations() == 0
    assert standin.records() == []


def test_it_refuses_a_decision_from_someone_without_the_permission(refund_waiting):
    clerk = User.objects.create_user("clerk")

    with pytest.raises(ApprovalError, match="clerk may not approve or reject in workspace demo."):
        approve_operation(refund_waiting, user=clerk)

    assert Operation.objects.get().state == "pending_approval"
    assert not Approval.objects.exists()


def test_it_refuses_to_run_an_approval_whose_payload_changed_afterwards(refund_waiting, approver, standin):
    """The worker's own check: an approval covers the payload it was given for, even if something
    outside the services (here a direct database write) changed the payload after approval."""
    approve_operation(refund_waiting, user=approver)
    Operation.objects.filter(pk=refund_waiting.pk).update(
        payload=REFUND | {"amount_cents": 999_999}, fingerprint="0" * 64
    )

    process_due_operations()

    operation = Operation.objects.get()
    assert (operation.state, operation.last_error["message"]) == ("needs_review", "no approval covers this payload")
    assert standin.records() == []
    assert standin.requests() == 0


def test_it_refuses_a_rejection_without_a_reason(refund_waiting, approver):
    with pytest.raises(ApprovalError, match="Say why"):
        reject_operation(refund_waiting, user=approver, note="  ")
    assert Operation.objects.get().state == "pending_approval"


def test_it_refuses_to_approve_a_payload_other_than_the_one_shown(workspace, refund_waiting, approver, corrector):
    shown = refund_waiting.fingerprint
    conflict = Conflict.objects.get(pk=refund(workspace, amount_cents=450000).conflict.pk)
    conflict_decisions.apply_conflict(conflict, user=corrector, reason="sender corrected the amount")
    operation = Operation.objects.get()

    with pytest.raises(ApprovalError, match="changed since it was shown"):
        approve_operation(operation, user=approver, fingerprint=shown)

    assert operation.state == "pending_approval"
    approve_operation(operation, user=approver, fingerprint=operation.fingerprint)
    assert Approval.objects.get().fingerprint == operation.fingerprint != shown


def test_it_decides_once_when_two_approvers_race(refund_waiting, approver):
    stale_copy = Operation.objects.get(pk=refund_waiting.pk)
    approve_operation(refund_waiting, user=approver)

    with pytest.raises(ApprovalError, match="only an operation awaiting approval can be decided"):
        reject_operation(Operation.objects.get(pk=refund_waiting.pk), user=approver, note="late")
    with pytest.raises(ApprovalError, match="changed meanwhile"):
        reject_operation(stale_copy, user=approver, note="late")

    assert list(Approval.objects.values_list("decision", flat=True)) == ["approved"]


def test_it_refuses_to_apply_a_conflict_to_an_approved_operation(workspace, refund_waiting, approver, corrector):
    approve_operation(refund_waiting, user=approver)
    conflict = Conflict.objects.get(pk=refund(workspace, amount_cents=999).conflict.pk)

    with pytest.raises(review.ReviewError, match="can only be applied before the operation runs"):
        conflict_decisions.apply_conflict(conflict, user=corrector, reason="too late")

    assert Operation.objects.get().payload["amount_cents"] == 4500


def test_it_does_not_run_a_consequential_operation_whose_approval_does_not_cover_it(refund_waiting, standin):
    """Should anything put it in `pending` without a sign-off, the worker still refuses."""
    Operation.objects.filter(pk=refund_waiting.pk).update(state="pending")

    process_due_operations()

    operation = Operation.objects.get()
    assert (operation.state, operation.last_error["message"]) == ("needs_review", "no approval covers this payload")
    assert standin.records() == []


def test_it_asks_for_a_new_approval_when_a_consequential_operation_is_replayed(
    refund_waiting, approver, standin, reviewer
):
    standin.fail_next({"kind": "status", "status": 422})
    approve_operation(refund_waiting, user=approver)
    process_due_operations()
    operation = Operation.objects.get()
    assert operation.state == "needs_review"

    replays.replay_operation(operation, user=reviewer, reason="customer record fixed")

    assert Operation.objects.get().state == "pending_approval"
    approve_operation(Operation.objects.get(), user=approver, note="again")
    process_due_operations()
    assert Operation.objects.get().state == "succeeded"
    assert Approval.objects.count() == 2


def test_it_approves_and_rejects_from_the_command_line(workspace, refund_waiting, approver):
    other = refund(workspace, request_id="R-8").operation
    out = StringIO()

    call_command("approve", refund_waiting.key, "--workspace", "demo", "--as", "approver", stdout=out)
    call_command("reject", other.key, "--workspace", "demo", "--as", "approver", "--note", "no", stdout=out)

    assert out.getvalue().splitlines() == [f"{refund_waiting.key} is now pending.", f"{other.key} is now rejected."]


@pytest.mark.parametrize(
    ("username", "message"),
    [("nobody", "No active user 'nobody'."), ("clerk", "clerk may not approve or reject in workspace demo.")],
)
def test_it_explains_a_refused_decision_on_the_command_line(refund_waiting, username, message):
    User.objects.create_user("clerk")
    with pytest.raises(CommandError, match=message):
        call_command("approve", refund_waiting.key, "--workspace", "demo", "--as", username, stdout=StringIO())


def test_it_refuses_an_approval_made_on_a_copy_loaded_before_the_payload_changed(
    workspace, refund_waiting, approver, corrector
):
    """The database guard itself requires the payload the approver's copy holds."""
    stale_copy = Operation.objects.get(pk=refund_waiting.pk)
    conflict = Conflict.objects.get(pk=refund(workspace, amount_cents=450000).conflict.pk)
    conflict_decisions.apply_conflict(conflict, user=corrector, reason="sender corrected the amount")

    with pytest.raises(ApprovalError, match="changed meanwhile"):
        approve_operation(stale_copy, user=approver)

    assert Operation.objects.get().state == "pending_approval"
    assert not Approval.objects.exists()
