"""A replay never becomes the duplicate it is meant to fix: when a try may already have reached the
destination, the destination is asked first (found: succeeded, nothing sent; absent: replay;
cannot tell: refused unless a person explicitly accepts the risk, audited as ``replay_forced``).

Against a real HTTP destination (the stand-in) with ``send-notice``, whose destination ignores
idempotency keys: a second send makes a second record.
"""

import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, Contribution, Delivery, Operation
from ledger.people import replays, review
from reconciliation.reconcile import reconcile_operation
from tests.conftest import external_event

LOOKUP_503 = {"kind": "status", "status": 503}


@pytest.fixture
def gives_up_at_once(settings):
    """Reconciliation gives up after its first failed lookup (the behaviour before it was patient)."""
    settings.OPSCONSOLE_RECONCILE_GIVE_UP_SECONDS = 0


def needing_review_after_a_failed_lookup(workspace, standin, create_fault, time_machine) -> Operation:
    """The story of the issue: the destination acted (or not) and the answer was lost, the
    reconciler's lookup failed, the operation needs review."""
    standin.fail_next(create_fault)
    result = submit_event(workspace=workspace, raw=external_event("send-notice"), source="api")
    process_due_operations(worker="w1")
    operation = Operation.objects.get(pk=result.operation.pk)
    assert operation.state == "unknown"
    time_machine.move_to(operation.next_attempt_at)
    standin.fail_next_lookup(LOOKUP_503)
    assert reconcile_operation(operation) == "gave_up"
    operation.refresh_from_db()
    assert operation.state == "needs_review"
    return operation


@pytest.fixture
def acted_and_lost(workspace, standin, time_machine, gives_up_at_once):
    """The destination holds the record; the ledger could not learn it."""
    return needing_review_after_a_failed_lookup(workspace, standin, {"kind": "drop_after_commit"}, time_machine)


@pytest.fixture
def never_acted(workspace, standin, time_machine, gives_up_at_once):
    """The request never reached the destination, but the ledger cannot know that."""
    return needing_review_after_a_failed_lookup(workspace, standin, {"kind": "reset_before"}, time_machine)


def test_it_finds_the_record_and_sends_nothing(acted_and_lost, standin, reviewer):
    [record] = standin.records()

    replay = replays.replay_operation(acted_and_lost, user=reviewer, reason="customer asks")

    assert (replay.verdict, replay.lookup) == ("found", f"the destination has record {record['id']}")
    acted_and_lost.refresh_from_db()
    assert (acted_and_lost.state, acted_and_lost.external_id, acted_and_lost.last_error) == (
        "succeeded",
        record["id"],
        None,
    )
    event = AuditEvent.objects.get(kind="reconciled_on_replay")
    assert (event.actor, event.from_state, event.to_state) == ("operator", "needs_review", "succeeded")
    assert record["id"] in event.message
    assert "nothing was sent" in event.message
    assert process_due_operations() == 0
    assert standin.records() == [record]
    assert standin.requests("POST /records") == 1


def test_it_replays_when_the_destination_confirms_it_has_nothing(never_acted, standin, reviewer):
    replay = replays.replay_operation(never_acted, user=reviewer, reason="vendor fixed")

    assert (replay.verdict, never_acted.state) == ("replayed", "pending")
    assert "the destination has no record" in AuditEvent.objects.get(kind="replayed").message
    process_due_operations()
    never_acted.refresh_from_db()
    [record] = standin.records()
    assert (never_acted.state, never_acted.external_id) == ("succeeded", record["id"])


def test_it_refuses_a_replay_when_the_destination_cannot_tell(acted_and_lost, standin, reviewer):
    standin.fail_next_lookup(LOOKUP_503)

    with pytest.raises(
        replays.DuplicateRisk,
        match=re.escape(
            f"Replay refused: the destination cannot tell whether {acted_and_lost.key} already acted there "
            "(lookup failed: HTTP 503 from 127.0.0.1 [injected_fault]: status 503). Sending it again could make "
            "a second send-notice."
        ),
    ):
        replays.replay_operation(acted_and_lost, user=reviewer, reason="customer asks")

    acted_and_lost.refresh_from_db()
    assert acted_and_lost.state == "needs_review"
    refused = AuditEvent.objects.get(kind="replay_refused")
    assert (refused.actor, refused.to_state) == ("operator", "")
    assert not Delivery.objects.filter(source="replay").exists()
    assert not Contribution.objects.exists()
    assert process_due_operations() == 0
    assert len(standin.records()) == 1


def test_it_replays_accepting_the_risk_only_when_a_person_says_so(acted_and_lost, standin, reviewer):
    standin.fail_next_lookup(LOOKUP_503)

    replay = replays.replay_operation(
        acted_and_lost, user=reviewer, reason="checked the vendor portal: nothing", accept_duplicate_risk=True
    )

    assert (replay.verdict, acted_and_lost.state) == ("forced", "pending")
    forced = AuditEvent.objects.get(kind="replay_forced")
    assert (forced.actor, forced.from_state, forced.to_state) == ("operator", "needs_review", "pending")
    assert forced.message.startswith("replay accepting the duplicate risk: checked the vendor portal: nothing")
    assert "the destination cannot tell: lookup failed: HTTP 503" in forced.message
    assert list(Contribution.objects.values_list("user__username", "kind")) == [("operator", "replayed")]
    process_due_operations()
    # The risk was real: this destination does not deduplicate, so it now holds two records.
    assert len(standin.records(reference=acted_and_lost.key)) == 2


def test_it_follows_the_destination_even_when_the_risk_is_accepted(acted_and_lost, standin, reviewer):
    """Accepting the risk only matters when the destination cannot tell; found still sends nothing."""
    replay = replays.replay_operation(acted_and_lost, user=reviewer, reason="x", accept_duplicate_risk=True)

    assert replay.verdict == "found"
    assert len(standin.records()) == 1


def test_it_wants_a_reason_to_accept_the_risk(acted_and_lost, reviewer):
    with pytest.raises(review.ReviewError, match="Say why the replay may risk a duplicate"):
        replays.replay_operation(acted_and_lost, user=reviewer, reason=" ", accept_duplicate_risk=True)
    assert Operation.objects.get().state == "needs_review"


def test_it_does_not_believe_absent_while_a_request_may_still_land(workspace, standin, reviewer, gives_up_at_once):
    standin.fail_next({"kind": "reset_before"})
    operation = submit_event(workspace=workspace, raw=external_event("send-notice"), source="api").operation
    process_due_operations()
    operation.refresh_from_db()
    standin.fail_next_lookup(LOOKUP_503)
    assert reconcile_operation(operation, asked_by_person=True) == "gave_up"  # before the request settled
    operation.refresh_from_db()

    with pytest.raises(
        replays.DuplicateRisk,
        match=r"no record yet, but the last request may still land \(within \d+[smh] of the try's start\)",
    ):
        replays.replay_operation(operation, user=reviewer, reason="too soon")


def test_it_refuses_when_the_action_cannot_look_up(workspace, scripted_action, reviewer):
    from ledger.outcomes import AmbiguousError

    action = scripted_action(external=True)
    action.destination.answer(AmbiguousError("read timeout"))
    operation = submit_event(
        workspace=workspace, source="api", raw={"action": action.name, "data": {"request_id": "R-1", "version": 1}}
    ).operation
    process_due_operations()
    operation.refresh_from_db()
    assert reconcile_operation(operation) == "gave_up"  # no lookup: asking again cannot help
    operation.refresh_from_db()

    with pytest.raises(replays.DuplicateRisk, match="cannot look its records up at the destination"):
        replays.replay_operation(operation, user=reviewer, reason="retry")
    assert len(action.destination.calls) == 1


def test_it_does_not_ask_when_no_try_reached_the_destination(workspace, standin, reviewer):
    standin.fail_next({"kind": "status", "status": 422})
    operation = submit_event(workspace=workspace, raw=external_event("send-notice"), source="api").operation
    process_due_operations()
    operation.refresh_from_db()
    assert operation.state == "needs_review"

    replay = replays.replay_operation(operation, user=reviewer, reason="payload fixed at the vendor")

    assert (replay.verdict, replay.lookup) == ("replayed", "")
    assert standin.requests("GET /records") == 0


def test_it_explains_the_refusal_and_the_override_on_the_command_line(acted_and_lost, standin, reviewer):
    key = acted_and_lost.key
    standin.fail_next_lookup(LOOKUP_503, LOOKUP_503)
    replay = ["replay", key, "--workspace", "demo", "--as", "operator", "--reason", "vendor portal shows nothing"]

    with pytest.raises(CommandError, match="run the command again with --accept-duplicate-risk"):
        call_command(*replay, stdout=StringIO())
    assert Operation.objects.get().state == "needs_review"

    out = StringIO()
    call_command(*replay, "--accept-duplicate-risk", stdout=out)

    assert out.getvalue().strip() == f"{key} is now pending (replay forced, accepting the duplicate risk)."
    assert AuditEvent.objects.get(kind="replay_forced").actor == "operator"


def test_it_reports_a_found_record_on_the_command_line(acted_and_lost, standin, reviewer):
    [record] = standin.records()
    out = StringIO()

    call_command("replay", acted_and_lost.key, "--workspace", "demo", "--as", "operator", "--reason", "x", stdout=out)

    assert out.getvalue().strip() == (
        f"{acted_and_lost.key} is now succeeded: the destination has record {record['id']}, so nothing was sent again."
    )
