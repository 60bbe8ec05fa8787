"""on_conflict: hold (ledger.people.holds). A delivery that reuses a key with a changed payload before
the operation has run holds it in needs_review; the worker does not perform it; applying the conflict
runs it once with the incoming payload, dismissing it runs it once with the recorded one. Under
first_wins, and after the operation ran, a conflict changes nothing but itself."""

import re

import pytest
from django.core.management import CommandError

from ledger.actions import get_action
from ledger.actions.base import ActionDefinition, register
from ledger.engine.processing import process_due_operations
from ledger.intake.reservation import CONFLICT_HOLD
from ledger.intake.submit import submit_batch, submit_event
from ledger.models import Attempt, AuditEvent, Conflict, HttpAction, Operation
from ledger.people import approvals, cancellations, conflict_decisions, replays, resolutions, review
from ledger.states import HOLDABLE_STATES, State, can_transition
from tests.ledger.conftest import NoteData
from tests.ledger.integrations.test_configured_actions import ACTION, apply, file_text
from tests.ledger.test_sql_edges import function_text, quoted

HELD_MESSAGE = (
    "held: a conflicting delivery arrived (conflict {pk}: note differ); apply or dismiss it to let the operation run"
)


def send(workspace, action, note, *, request_id="R-1", delivery_id=None):
    raw = {
        "action": action.name,
        "delivery_id": delivery_id or f"{request_id}-{note}",
        "data": {"request_id": request_id, "version": 1, "note": note},
    }
    return submit_event(workspace=workspace, source="api", raw=raw)


def held_operation(workspace, action, *, request_id="R-1"):
    first = send(workspace, action, "first", request_id=request_id)
    assert first.outcome == "accepted"
    second = send(workspace, action, "second", request_id=request_id)
    assert second.outcome == "conflict"
    return Operation.objects.get(pk=first.operation.pk), second.conflict


def test_a_conflict_before_the_operation_ran_holds_it_and_the_worker_leaves_it(workspace, noted):
    action = noted(on_conflict="hold")

    first = send(workspace, action, "first")
    second = send(workspace, action, "second")

    assert second.outcome == "conflict"
    assert (second.operation.state, second.operation.last_error_category) == ("needs_review", "conflict")
    operation = Operation.objects.get()
    assert operation.state == "needs_review"
    assert operation.last_error_message == HELD_MESSAGE.format(pk=second.conflict.pk)
    held = AuditEvent.objects.get(kind="conflict_held")
    assert (held.operation_id, held.from_state, held.to_state, held.error_category) == (
        first.operation.pk,
        "pending",
        "needs_review",
        "conflict",
    )
    assert held.message == operation.last_error_message

    process_due_operations()

    assert action.destination.notes == []
    assert Operation.objects.get().state == "needs_review"
    assert not Attempt.objects.exists()


def test_applying_the_conflict_releases_it_to_run_once_with_the_incoming_payload(workspace, noted, alice):
    action = noted(on_conflict="hold")
    operation, conflict = held_operation(workspace, action)

    conflict_decisions.apply_conflict(conflict, user=alice, reason="the sender corrected it")

    operation.refresh_from_db()
    assert (operation.state, operation.last_error_category, operation.last_error_message) == ("pending", "", "")
    released = AuditEvent.objects.get(kind="conflict_released")
    assert (released.actor, released.from_state, released.to_state) == ("alice", "needs_review", "pending")
    assert released.message == (
        f"released: conflict {conflict.pk} applied: the sender corrected it; the incoming payload stands"
    )

    process_due_operations()
    process_due_operations()

    assert action.destination.notes == ["second"]
    operation.refresh_from_db()
    assert (operation.state, operation.payload["note"], operation.attempts) == ("succeeded", "second", 1)


def test_dismissing_the_conflict_releases_it_to_run_once_with_the_recorded_payload(workspace, noted, bob):
    action = noted(on_conflict="hold")
    operation, conflict = held_operation(workspace, action)

    conflict_decisions.dismiss_conflict(conflict, user=bob, reason="a stale resend")

    operation.refresh_from_db()
    assert operation.state == "pending"
    process_due_operations()
    process_due_operations()

    assert action.destination.notes == ["first"]
    operation.refresh_from_db()
    assert (operation.state, operation.payload["note"]) == ("succeeded", "first")
    assert list(AuditEvent.objects.filter(operation=operation).values_list("kind", flat=True)) == [
        "reserved",
        "conflict_detected",
        "conflict_held",
        "conflict_dismissed",
        "conflict_released",
        "claimed",
        "succeeded",
    ]


def test_it_stays_held_while_any_of_its_conflicts_is_open(workspace, noted, alice):
    action = noted(on_conflict="hold")
    operation, first_conflict = held_operation(workspace, action)
    later = send(workspace, action, "third")
    assert later.outcome == "conflict"
    assert AuditEvent.objects.filter(kind="conflict_held").count() == 1  # held once, not again

    conflict_decisions.dismiss_conflict(first_conflict, user=alice, reason="stale")
    operation.refresh_from_db()
    assert operation.state == "needs_review"
    process_due_operations()
    assert action.destination.notes == []

    conflict_decisions.apply_dismissing_the_rest(later.conflict, user=alice, reason="the third is right", rest=[])
    operation.refresh_from_db()
    assert operation.state == "pending"
    process_due_operations()
    assert action.destination.notes == ["third"]


def test_dismissing_a_selection_releases_every_operation_it_leaves_without_an_open_conflict(workspace, noted, alice):
    action = noted(on_conflict="hold")
    one, one_conflict = held_operation(workspace, action, request_id="R-1")
    two, two_conflict = held_operation(workspace, action, request_id="R-2")

    done = conflict_decisions.dismiss_conflicts({one_conflict.pk, two_conflict.pk}, user=alice, reason="resends")

    assert len(done.dismissed) == 2
    assert set(Operation.objects.values_list("state", flat=True)) == {"pending"}
    assert AuditEvent.objects.filter(kind="conflict_released").count() == 2
    process_due_operations()
    assert sorted(action.destination.notes) == ["first", "first"]


def test_a_held_operation_is_not_replayed_without_a_decision(workspace, noted, alice):
    action = noted(on_conflict="hold")
    operation, _ = held_operation(workspace, action)

    with pytest.raises(review.ReviewError, match="held by a conflicting delivery and has not run"):
        replays.replay_operation(operation, user=alice, reason="just run it")

    operation.refresh_from_db()
    assert operation.state == "needs_review"


def test_a_held_operation_is_not_marked_succeeded_by_hand(workspace, noted, alice):
    action = noted(on_conflict="hold", external=True)
    operation, _ = held_operation(workspace, action)

    with pytest.raises(review.ReviewError, match="held by a conflicting delivery and never ran"):
        resolutions.resolve_operation(operation, user=alice, external_id="X-1", reason="found it")

    assert Operation.objects.get().state == "needs_review"


def test_a_held_operation_may_still_be_cancelled(workspace, noted, alice):
    action = noted(on_conflict="hold")
    operation, _ = held_operation(workspace, action)

    cancellations.cancel_operation(operation, user=alice, reason="neither payload is wanted")

    process_due_operations()
    assert Operation.objects.get().state == "cancelled"
    assert action.destination.notes == []


def test_a_conflict_after_the_operation_ran_stays_open_and_holds_nothing(workspace, noted):
    action = noted(on_conflict="hold")
    send(workspace, action, "first")
    process_due_operations()

    late = send(workspace, action, "second")

    assert late.outcome == "conflict"
    assert Operation.objects.get().state == "succeeded"
    assert Conflict.objects.get().status == "open"
    assert not AuditEvent.objects.filter(kind="conflict_held").exists()
    assert action.destination.notes == ["first"]


def test_first_wins_leaves_the_operation_to_run_with_the_first_payload(workspace, noted):
    action = noted()
    assert action.on_conflict == "first_wins"
    send(workspace, action, "first")

    conflict = send(workspace, action, "second")

    assert conflict.outcome == "conflict"
    assert conflict.operation.state == "pending"
    assert not AuditEvent.objects.filter(kind="conflict_held").exists()
    process_due_operations()
    assert action.destination.notes == ["first"]
    assert Conflict.objects.get().status == "open"


def test_a_batch_holds_an_operation_its_own_later_event_conflicts_with(workspace, noted):
    """ledger_reserve (a batch): the key reserved by the first event, held by the second."""
    action = noted(on_conflict="hold")
    events = [
        {"action": action.name, "delivery_id": f"d-{note}", "data": {"request_id": "R-1", "version": 1, "note": note}}
        for note in ("first", "second", "third")
    ]

    results = submit_batch(workspace=workspace, source="api", raw_events=events)

    assert [result.outcome for result in results] == ["accepted", "conflict", "conflict"]
    operation = Operation.objects.get()
    assert operation.state == "needs_review"
    conflicts = list(Conflict.objects.order_by("pk"))
    assert operation.last_error_message == HELD_MESSAGE.format(pk=conflicts[0].pk)
    assert list(AuditEvent.objects.filter(operation=operation).values_list("kind", "to_state")) == [
        ("reserved", "pending"),
        ("conflict_detected", ""),
        ("conflict_detected", ""),
        ("conflict_held", "needs_review"),
    ]
    assert results[2].operation.state == "needs_review"
    process_due_operations()
    assert action.destination.notes == []


def test_a_consequential_operation_held_before_approval_goes_back_to_await_it(workspace, noted, alice, approver):
    action = noted(on_conflict="hold", consequential=True)
    operation, conflict = held_operation(workspace, action)
    assert AuditEvent.objects.get(kind="conflict_held").from_state == "pending_approval"

    conflict_decisions.apply_conflict(conflict, user=alice, reason="corrected amount")

    operation.refresh_from_db()
    assert (operation.state, operation.payload["note"]) == ("pending_approval", "second")
    process_due_operations()
    assert action.destination.notes == []
    approvals.approve_operation(operation, user=approver, note="ok")
    process_due_operations()
    assert action.destination.notes == ["second"]


def test_an_approved_operation_held_by_a_conflict_keeps_its_approved_payload(workspace, noted, alice, approver):
    """The approval covers the payload it was given for: the conflict can be dismissed, not applied."""
    action = noted(on_conflict="hold", consequential=True)
    first = send(workspace, action, "first")
    approvals.approve_operation(Operation.objects.get(pk=first.operation.pk), user=approver, note="ok")
    conflict = send(workspace, action, "second").conflict
    operation = Operation.objects.get()
    assert operation.state == "needs_review"
    assert AuditEvent.objects.get(kind="conflict_held").from_state == "pending"
    assert not conflict_decisions.may_apply(operation, action)

    with pytest.raises(review.ReviewError, match="a conflict can only be applied before the operation runs"):
        conflict_decisions.apply_conflict(Conflict.objects.get(pk=conflict.pk), user=alice, reason="take the new one")
    assert Conflict.objects.get(pk=conflict.pk).status == "open"
    assert Operation.objects.get().state == "needs_review"

    conflict_decisions.dismiss_conflict(
        Conflict.objects.get(pk=conflict.pk), user=alice, reason="keep what was approved"
    )
    assert Operation.objects.get().state == "pending"
    process_due_operations()
    assert action.destination.notes == ["first"]


def test_the_demo_refund_holds_and_prepare_brief_keeps_first_wins():
    assert get_action("issue-refund").on_conflict == "hold"
    assert get_action("prepare-brief").on_conflict == "first_wins"


def test_an_action_declaring_an_unknown_policy_is_refused():
    class Sometimes(ActionDefinition):
        name = "test-on-conflict-sometimes"
        schema = NoteData
        fingerprint_fields = ("request_id", "version", "note")
        on_conflict = "sometimes"

    with pytest.raises(ValueError, match="declares on_conflict 'sometimes': say 'first_wins' or 'hold'"):
        register(Sometimes)


def test_a_configured_action_takes_the_policy_from_its_file(tmp_path, workspace, monkeypatch):
    apply(tmp_path, file_text(action=ACTION | {"on_conflict": "hold"}))

    assert HttpAction.objects.get().on_conflict == "hold"
    assert get_action("notify-crm").on_conflict == "hold"
    send_crm = {"action": "notify-crm", "data": {"request_id": "N-1", "amount": 5}}
    submit_event(workspace=workspace, source="api", raw=send_crm)
    submit_event(workspace=workspace, source="api", raw=send_crm | {"data": {"request_id": "N-1", "amount": 6}})
    assert Operation.objects.get().state == "needs_review"


def test_a_configured_action_defaults_to_first_wins(tmp_path, db):
    apply(tmp_path, file_text())

    assert get_action("notify-crm").on_conflict == "first_wins"


@pytest.mark.parametrize("value", ["sometimes", "HOLD", "", True])
def test_a_file_with_an_unknown_policy_changes_nothing_and_says_what_is_allowed(tmp_path, db, value):
    with pytest.raises(CommandError) as refused:
        apply(tmp_path, file_text(action=ACTION | {"on_conflict": value}))

    assert (
        f"http_actions[0].on_conflict: one of first_wins, hold (what a redelivery with a changed payload does "
        f"before the operation runs), not {value!r}"
    ) in str(refused.value)
    assert not HttpAction.objects.exists()


@pytest.mark.parametrize("function", ["ledger_reserve", "ledger_reserve_one"])
def test_intake_holds_only_from_the_states_the_table_lets_go_to_needs_review(db, function):
    """The hold in SQL (migration 0036) takes rows in the states its ``state IN (..)`` lists: the
    states where an operation has not run (``HOLDABLE_STATES``), each an edge to needs_review."""
    text = function_text(function)

    [guard] = re.findall(r"\bstate\s+IN\s*\(([^)]*)\)\s+AND attempts = 0", text, flags=re.IGNORECASE)
    assert quoted(guard) == set(HOLDABLE_STATES)
    assert all(can_transition(state, State.NEEDS_REVIEW) for state in HOLDABLE_STATES)
    assert all(can_transition(State.NEEDS_REVIEW, state) for state in HOLDABLE_STATES)  # the release
    assert re.findall(r"SET state = '(\w+)', last_error_category = '(\w+)'", text) == [("needs_review", CONFLICT_HOLD)]
