"""Conflict decisions made with the facts (ledger.people.may.conflict_refusal): a person who may not
see the sensitive fields a conflict differs in (a refund's amount) may not apply one side of it: the
service refuses, with who may, and writes nothing. They may still dismiss it, or assign the
operation to an approver, who sees the values and may decide it either way."""

import pytest

from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, Conflict, Contribution, Operation
from ledger.people import assignment, conflict_decisions, review

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4350, "currency": "EUR"}


@pytest.fixture
def held_refund(workspace):
    """A refund awaiting approval, then sent again with 43.51 for 43.50: held by the conflict."""
    raw = {"action": "issue-refund", "data": REFUND}
    operation = submit_event(workspace=workspace, source="api", raw=raw).operation
    conflict = submit_event(
        workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND | {"amount_cents": 4351}}
    ).conflict
    assert conflict is not None
    operation.refresh_from_db()
    assert (operation.state, operation.last_error_category) == ("needs_review", "conflict")
    return conflict


def snapshot():
    return (
        list(Operation.objects.order_by("pk").values_list("pk", "state", "payload", "assigned_to")),
        list(Conflict.objects.order_by("pk").values_list("pk", "status", "decided_by")),
        AuditEvent.objects.count(),
        Contribution.objects.count(),
    )


@pytest.mark.parametrize("role", ["operator", "viewer"])
def test_it_refuses_applying_a_side_to_whoever_may_not_see_the_amounts(held_refund, person, role):
    someone = person("someone", role)
    before = snapshot()

    with pytest.raises(review.ReviewError) as refused:
        conflict_decisions.apply_conflict(held_refund, user=someone, reason="the new amount")

    assert snapshot() == before
    if role == "operator":
        assert str(refused.value) == (
            f"Conflict {held_refund.pk} on {held_refund.operation.key} differs in Amount, which someone may not "
            "see: only approvers and admins of workspace demo may apply one side of it. Dismiss it (the recorded "
            "payload stays), or assign the operation to one of them."
        )
    else:
        assert str(refused.value) == "someone may not replay, resolve, cancel or decide conflicts in workspace demo."


def test_it_refuses_applying_it_with_the_rest_dismissed_too(held_refund, alice):
    before = snapshot()

    with pytest.raises(review.ReviewError, match="may not see"):
        conflict_decisions.apply_dismissing_the_rest(held_refund, user=alice, reason="the new amount", rest=[])

    assert snapshot() == before


def test_an_approver_may_apply_the_incoming_amount_and_cannot_then_approve_it(held_refund, person):
    approver = person("carol", "approver")

    conflict_decisions.apply_conflict(held_refund, user=approver, reason="the corrected amount is what was agreed")

    operation = Operation.objects.get()
    assert operation.payload["amount_cents"] == 4351
    assert operation.state == "pending_approval"  # released where it was held: it awaits approval again
    assert Conflict.objects.get().status == "applied"
    assert AuditEvent.objects.filter(kind="conflict_applied", actor="carol").count() == 1
    # Four eyes: who changed the payload does not approve it.
    assert Contribution.objects.filter(user=approver, kind="changed").exists()


@pytest.mark.parametrize("role", ["operator", "approver", "admin"])
def test_whoever_decides_it_may_dismiss_it(held_refund, person, role):
    someone = person("someone", role)

    conflict_decisions.dismiss_conflict(held_refund, user=someone, reason="a resend of an older draft")

    operation = Operation.objects.get()
    assert (operation.payload["amount_cents"], operation.state) == (4350, "pending_approval")
    assert Conflict.objects.get().decided_by == "someone"


def test_a_viewer_may_not_dismiss_it(held_refund, person):
    viewer = person("watcher", "viewer")
    before = snapshot()

    with pytest.raises(review.ReviewError, match="may not replay, resolve, cancel or decide conflicts"):
        conflict_decisions.dismiss_conflicts([held_refund.pk], user=viewer, reason="no")

    assert snapshot() == before


def test_an_approver_decides_only_conflicts_in_sensitive_fields(workspace, person):
    """Approvers do not review otherwise: a conflict in a title stays the operators'."""
    from tests.ledger.people.test_bulk_conflicts import race

    _, [conflict] = race(workspace, 1)
    approver = person("carol", "approver")
    before = snapshot()

    for decide in (conflict_decisions.apply_conflict, conflict_decisions.dismiss_conflict):
        with pytest.raises(review.ReviewError, match="carol may not replay, resolve, cancel or decide conflicts"):
            decide(conflict, user=approver, reason="mine")
    assert snapshot() == before


def test_an_operator_applies_a_conflict_in_fields_they_see(workspace, alice):
    """Only the sensitive fields it differs in matter: the same refund's currency is no secret."""
    submit_event(workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND})
    conflict = submit_event(
        workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND | {"currency": "USD"}}
    ).conflict

    conflict_decisions.apply_conflict(conflict, user=alice, reason="the sender meant dollars")

    assert Operation.objects.get().payload["currency"] == "USD"


def test_an_operator_hands_it_to_an_approver_who_decides_it(held_refund, alice, person):
    approver = person("carol", "approver")
    operation = held_refund.operation

    assert assignment.assign_operation(operation, user=alice, to=approver)
    assert not assignment.assign_operation(operation, user=alice, to=approver)  # a second press: nothing more

    assert Operation.objects.get().assigned_to == approver
    assert list(AuditEvent.objects.filter(kind="assigned").values_list("actor", "message")) == [
        ("alice", "assigned to carol")
    ]
    conflict_decisions.apply_conflict(held_refund, user=approver, reason="the corrected amount is right")
    assert Operation.objects.get().payload["amount_cents"] == 4351


def test_it_refuses_handing_it_to_someone_who_may_not_act_on_it(held_refund, alice, person):
    viewer = person("watcher", "viewer")
    before = snapshot()

    with pytest.raises(assignment.AssignmentError, match="watcher may not act on operations of workspace"):
        assignment.assign_operation(held_refund.operation, user=alice, to=viewer)

    assert snapshot() == before


def test_it_refuses_handing_on_what_someone_else_took(held_refund, alice, bob, person):
    approver = person("carol", "approver")
    assignment.take_operation(held_refund.operation, user=bob)
    before = snapshot()

    with pytest.raises(assignment.HeldBySomeoneElse, match="bob has taken this operation"):
        assignment.assign_operation(held_refund.operation, user=alice, to=approver)

    assert snapshot() == before


def test_an_approver_dismisses_refund_conflicts_in_bulk_not_a_selection_with_others(workspace, held_refund, person):
    """Many at once, each conflict by the rule: one the approver may not decide (a title's) refuses
    the whole selection, nothing written; the refunds' alone are dismissed."""
    from tests.ledger.people.test_bulk_conflicts import race

    _, [title_conflict] = race(workspace, 1)
    approver = person("carol", "approver")
    before = snapshot()

    with pytest.raises(review.ReviewError, match="carol may not replay, resolve, cancel or decide conflicts"):
        conflict_decisions.dismiss_conflicts([held_refund.pk, title_conflict.pk], user=approver, reason="stale")
    assert snapshot() == before

    done = conflict_decisions.dismiss_conflicts([held_refund.pk], user=approver, reason="a resend of an old draft")
    assert [c.pk for c in done.dismissed] == [held_refund.pk]
    assert Conflict.objects.get(pk=title_conflict.pk).status == "open"
