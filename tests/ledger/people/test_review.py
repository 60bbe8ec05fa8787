"""A person can replay an operation that needs review (same key) or cancel one that has not ended."""

import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django_q.models import OrmQ

from ledger.engine.processing import process_due_operations
from ledger.models import Attempt, AuditEvent, Delivery, Operation, ReviewDraft
from ledger.outcomes import PermanentError
from ledger.people import cancellations, replays, review
from tests.ledger.conftest import submit, submit_brief


def needing_review(workspace, scripted_action, **declared):
    action = scripted_action(**declared)
    action.destination.answer(PermanentError("owner does not exist"))
    operation = submit(workspace, action.name)
    process_due_operations(worker="w1")
    operation.refresh_from_db()
    assert operation.state == "needs_review"
    return action, operation


def test_it_replays_under_the_same_key_and_the_operation_then_succeeds(
    workspace, scripted_action, django_capture_on_commit_callbacks, alice
):
    action, operation = needing_review(workspace, scripted_action, external=True, honours_idempotency_keys=True)
    deadline_before = operation.deadline
    OrmQ.objects.all().delete()  # intake's own wake-up

    with django_capture_on_commit_callbacks(execute=True):
        replays.replay_operation(operation, user=alice, reason="owner created in the CRM")

    operation.refresh_from_db()
    assert (operation.state, operation.attempts, operation.last_error) == ("pending", 0, None)
    assert operation.deadline > deadline_before
    replay = Delivery.objects.get(source="replay")
    assert (replay.operation, replay.submitted_by, replay.outcome, replay.key) == (
        operation,
        "alice",
        "accepted",
        operation.key,
    )
    event = AuditEvent.objects.get(kind="replayed")
    assert (event.actor, event.from_state, event.to_state) == ("alice", "needs_review", "pending")
    assert event.message == "replay: owner created in the CRM after 1 attempt(s)"
    # The replay nudges the workers once it commits.
    assert OrmQ.objects.count() == 1

    process_due_operations(worker="w2")

    operation.refresh_from_db()
    assert operation.state == "succeeded"
    assert Operation.objects.count() == 1
    keys_sent = list(Attempt.objects.order_by("fencing_token").values_list("idempotency_key", flat=True))
    assert keys_sent == [operation.key, operation.key]


def test_it_calls_out_a_replay_after_the_definition_changed(workspace, scripted_action, alice):
    action, operation = needing_review(workspace, scripted_action)
    Operation.objects.filter(pk=operation.pk).update(definition_version="old-version")
    operation.refresh_from_db()

    replays.replay_operation(operation, user=alice, reason="retry")

    operation.refresh_from_db()
    assert operation.definition_version == action.version
    assert f"(definition changed old-version -> {action.version})" in AuditEvent.objects.get(kind="replayed").message


def test_it_replays_a_consequential_operation_into_approval(workspace, scripted_action, alice):
    action, operation = needing_review(workspace, scripted_action)
    type(action).consequential = True  # declared consequential after the operation needed review

    replays.replay_operation(operation, user=alice, reason="retry")

    operation.refresh_from_db()
    assert operation.state == "pending_approval"


@pytest.mark.parametrize("state", ["pending", "retrying", "unknown", "succeeded", "cancelled"])
def test_it_refuses_to_replay_an_operation_that_does_not_need_review(workspace, state, alice):
    operation = submit_brief(workspace)
    Operation.objects.filter(pk=operation.pk).update(state=state)
    operation.refresh_from_db()

    refusal = f"Only an operation that needs review can be replayed; .* is {state}."
    with pytest.raises(review.ReviewError, match=refusal):
        replays.replay_operation(operation, user=alice, reason="retry")

    assert not AuditEvent.objects.filter(kind="replayed").exists()
    assert not Delivery.objects.filter(source="replay").exists()


def test_it_refuses_a_replay_that_lost_a_race(workspace, scripted_action, alice, bob):
    """Two people replay the same operation at once: the second finds it moved and writes nothing."""
    _, operation = needing_review(workspace, scripted_action)
    stale_copy = Operation.objects.get(pk=operation.pk)
    replays.replay_operation(operation, user=alice, reason="first")

    with pytest.raises(review.ReviewError, match="changed meanwhile"):
        replays.replay_operation(stale_copy, user=bob, reason="second")

    assert list(AuditEvent.objects.filter(kind="replayed").values_list("actor", flat=True)) == ["alice"]
    assert Delivery.objects.filter(source="replay").count() == 1


@pytest.mark.parametrize("state", ["pending", "retrying", "needs_review"])
def test_it_cancels_an_operation_that_has_not_ended(workspace, state, alice):
    operation = submit_brief(workspace)
    Operation.objects.filter(pk=operation.pk).update(state=state)
    operation.refresh_from_db()

    cancellations.cancel_operation(operation, user=alice, reason="request withdrawn")

    operation.refresh_from_db()
    assert operation.state == "cancelled"
    assert AuditEvent.objects.get(kind="cancelled").message == "cancel: request withdrawn"
    assert process_due_operations() == 0
    assert not ReviewDraft.objects.exists()


@pytest.mark.parametrize("state", ["processing", "unknown", "succeeded", "pending_approval"])
def test_it_refuses_to_cancel_an_operation_in_flight_or_ended(workspace, state, alice):
    operation = submit_brief(workspace)
    Operation.objects.filter(pk=operation.pk).update(state=state)
    operation.refresh_from_db()

    with pytest.raises(review.ReviewError, match="only needs_review, pending, retrying operations can be cancelled"):
        cancellations.cancel_operation(operation, user=alice, reason="no")

    operation.refresh_from_db()
    assert operation.state == state


def test_it_replays_and_cancels_from_the_command_line(workspace, scripted_action, alice):
    _, operation = needing_review(workspace, scripted_action)
    out = StringIO()

    call_command("replay", operation.key, "--workspace", "demo", "--as", "alice", "--reason", "fixed", stdout=out)
    call_command("cancel", operation.key, "--workspace", "demo", "--as", "alice", "--reason", "withdrawn", stdout=out)

    assert out.getvalue().splitlines() == [f"{operation.key} is now pending.", f"{operation.key} is now cancelled."]
    assert list(AuditEvent.objects.filter(kind__in=["replayed", "cancelled"]).values_list("actor", flat=True)) == [
        "alice",
        "alice",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["replay", "demo:nope:v1:prepare-brief", "--workspace", "demo", "--as", "alice", "--reason", "x"],
            "No operation 'demo:nope:v1:prepare-brief' in workspace 'demo'.",
        ),
        (
            ["cancel", "demo:R-42:v3:prepare-brief", "--workspace", "other", "--as", "alice", "--reason", "x"],
            "No operation 'demo:R-42:v3:prepare-brief' in workspace 'other'.",
        ),
        (
            ["replay", "demo:R-42:v3:prepare-brief", "--workspace", "demo", "--as", "alice", "--reason", "x"],
            "Only an operation that needs review can be replayed; demo:R-42:v3:prepare-brief is pending.",
        ),
        (
            ["replay", "demo:R-42:v3:prepare-brief", "--workspace", "demo", "--as", "nobody", "--reason", "x"],
            "No active user 'nobody'.",
        ),
        (
            ["cancel", "demo:R-42:v3:prepare-brief", "--workspace", "demo", "--as", "clerk", "--reason", "x"],
            "clerk may not replay, resolve, cancel or decide conflicts in workspace demo.",
        ),
    ],
)
def test_it_explains_what_a_command_cannot_do(workspace, args, message, alice, person):
    person("clerk", "viewer")
    submit_brief(workspace)
    with pytest.raises(CommandError, match=re.escape(message)):
        call_command(*args, stdout=StringIO())
