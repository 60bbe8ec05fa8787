"""The state machine, walked edge by edge through the one transition service."""

import itertools

import pytest
from django.db import IntegrityError, transaction

from ledger.core.transitions import IllegalTransition, transition_operation
from ledger.intake import submit
from ledger.models import AuditEvent, Operation
from ledger.states import TERMINAL_STATES, TRANSITIONS, State
from tests.conftest import event

# The edges, written out by hand: docs/design.md section 4, the extra edges of docs/architecture.md
# "States", and the ones added since. Never derived from TRANSITIONS, so a wrong edge in the
# table (say pending -> unknown) fails the walk below instead of being taken as expected.
EDGES = {
    # docs/design.md section 4
    ("pending_approval", "pending"),  # approve
    ("pending_approval", "rejected"),  # reject
    ("pending", "processing"),  # claim
    ("pending", "cancelled"),  # cancel
    ("pending", "superseded"),  # newer version already done (latest_wins)
    ("processing", "succeeded"),  # ok
    ("processing", "retrying"),  # transient, budget left
    ("processing", "needs_review"),  # permanent / budget spent / deadline passed
    ("processing", "unknown"),  # ambiguous outcome / lease expired (external, try begun)
    ("retrying", "processing"),  # due
    ("retrying", "cancelled"),  # cancel
    ("unknown", "succeeded"),  # reconciled: found
    ("unknown", "retrying"),  # reconciled: absent
    ("unknown", "needs_review"),  # cannot tell
    ("needs_review", "pending"),  # replay (same key)
    ("needs_review", "pending_approval"),  # replay of a consequential action
    ("needs_review", "succeeded"),  # resolve with evidence
    ("needs_review", "cancelled"),  # cancel
    # docs/architecture.md "States"
    ("processing", "pending"),  # lease expired, nothing left our database
    ("pending", "needs_review"),  # the sweep found the processing deadline passed
    ("retrying", "needs_review"),  # the sweep found the processing deadline passed
    # added since
    ("pending_approval", "needs_review"),  # nobody decided within the approval window
    ("pending_approval", "superseded"),  # a newer version arrived before approval (latest_wins)
    ("retrying", "superseded"),  # a newer version arrived before a retry succeeded (latest_wins)
    ("succeeded", "needs_review"),  # reconciliation audit found the record missing (a person reopens it)
    ("pending", "succeeded"),  # an internal set finished in its claim, never processing when committed
    ("retrying", "succeeded"),  # the same, for a retry (one audit event per real change)
}
REOPENED = {("succeeded", "needs_review")}  # a person's way out of a terminal state
TERMINAL = {"succeeded", "rejected", "cancelled", "superseded"}

ALL_PAIRS = [(a.value, b.value) for a, b in itertools.product(State, State)]


def make_operation(workspace, state: State) -> Operation:
    """A recorded operation, put into ``state`` directly (test setup only, not a transition)."""
    result = submit.submit_event(workspace=workspace, raw=event(), source="api")
    Operation.objects.filter(pk=result.operation.pk).update(state=state)
    return Operation.objects.get(pk=result.operation.pk)


def test_it_lists_every_state_in_the_table():
    assert set(TRANSITIONS) == set(State)
    assert TERMINAL_STATES == TERMINAL


def test_it_holds_exactly_the_designed_edges():
    """The table has every designed edge and no other: an edge added or dropped by mistake shows here."""
    table = {(from_state.value, to_state.value) for from_state, targets in TRANSITIONS.items() for to_state in targets}
    assert table - EDGES == set(), "edges in TRANSITIONS that the design does not have"
    assert EDGES - table == set(), "designed edges missing from TRANSITIONS"
    assert {from_state for from_state, _ in EDGES - REOPENED}.isdisjoint(TERMINAL)


@pytest.mark.parametrize(("from_state", "to_state"), ALL_PAIRS, ids=[f"{a}->{b}" for a, b in ALL_PAIRS])
def test_it_moves_along_an_edge_exactly_when_the_design_lists_it(workspace, from_state, to_state):
    """A designed edge: the row moves and one audit event records it. Any other pair:
    IllegalTransition, and nothing changes."""
    operation = make_operation(workspace, from_state)
    events_before = AuditEvent.objects.count()
    last_event = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first()

    if (from_state, to_state) in EDGES:
        assert transition_operation(operation, to_state=to_state, actor="test", kind="walk") is True
        assert Operation.objects.get(pk=operation.pk).state == to_state
        assert operation.state == to_state
        written = AuditEvent.objects.filter(pk__gt=last_event)
        assert [(e.from_state, e.to_state, e.kind, e.operation_id) for e in written] == [
            (from_state, to_state, "walk", operation.pk)
        ]
    else:
        with pytest.raises(IllegalTransition):
            transition_operation(operation, to_state=to_state, actor="test", kind="walk")
        assert Operation.objects.get(pk=operation.pk).state == from_state
        assert AuditEvent.objects.count() == events_before


def test_it_changes_nothing_when_another_process_moved_the_row_first(workspace):
    """Compare-and-set: a copy loaded before the move holds a stale from-state and loses."""
    operation = make_operation(workspace, State.PENDING)
    stale_copy = Operation.objects.get(pk=operation.pk)
    assert transition_operation(operation, to_state=State.PROCESSING, actor="worker-1", kind="claimed")
    events_before = AuditEvent.objects.count()

    assert transition_operation(stale_copy, to_state=State.CANCELLED, actor="worker-2", kind="cancelled") is False

    assert Operation.objects.get(pk=operation.pk).state == State.PROCESSING
    assert AuditEvent.objects.count() == events_before
    assert stale_copy.state == State.PENDING


def test_it_changes_nothing_under_a_wrong_fencing_token(workspace):
    operation = make_operation(workspace, State.PROCESSING)
    Operation.objects.filter(pk=operation.pk).update(fencing_token=7)
    operation.refresh_from_db()
    events_before = AuditEvent.objects.count()

    moved = transition_operation(operation, to_state=State.SUCCEEDED, actor="worker", kind="succeeded", fencing_token=6)

    assert moved is False
    assert Operation.objects.get(pk=operation.pk).state == State.PROCESSING
    assert AuditEvent.objects.count() == events_before


def test_it_moves_under_the_current_fencing_token(workspace):
    operation = make_operation(workspace, State.PROCESSING)
    Operation.objects.filter(pk=operation.pk).update(fencing_token=7)
    operation.refresh_from_db()

    assert transition_operation(
        operation, to_state=State.SUCCEEDED, actor="worker", kind="succeeded", fencing_token=7, external_id="draft-1"
    )

    stored = Operation.objects.get(pk=operation.pk)
    assert (stored.state, stored.external_id) == (State.SUCCEEDED, "draft-1")


def test_it_refuses_an_unknown_state_written_directly(workspace):
    """The CheckConstraint stands behind the table: no write can store a state it does not know."""
    operation = make_operation(workspace, State.PENDING)
    with pytest.raises(IntegrityError), transaction.atomic():
        Operation.objects.filter(pk=operation.pk).update(state="exploded")
    assert Operation.objects.get(pk=operation.pk).state == State.PENDING
