"""A worker whose lease expired and whose operation someone else took over changes nothing: its
completion is refused under the fencing token, and the refusal is audited."""

from datetime import timedelta

import pytest
from django.conf import settings

from ledger.core.transitions import transition_operation
from ledger.engine.claiming import claim_due_operations
from ledger.engine.performing import perform_claimed
from ledger.models import Attempt, AuditEvent, Operation, ReviewDraft
from ledger.outcomes import Success, TransientError
from ledger.states import State
from ledger.sweep import sweep
from tests.ledger.conftest import START, submit, submit_brief


def after_lease():
    return START + timedelta(seconds=settings.OPSCONSOLE_LEASE_SECONDS + 1)


def take_over(frozen):
    """The old claim's lease runs out; the sweep frees the operation and another worker claims it."""
    frozen.move_to(after_lease())
    sweep(now=after_lease())
    [taken] = claim_due_operations(limit=10, worker="new")
    return taken


def refusals(operation):
    return AuditEvent.objects.filter(operation=operation, kind="stale_completion_refused")


def assert_owned_by_new_claim(operation):
    operation.refresh_from_db()
    assert (operation.state, operation.lease_owner, operation.fencing_token) == ("processing", "new", 2)
    assert operation.result is None


def test_it_refuses_a_stale_internal_completion_and_keeps_no_draft(workspace, frozen):
    """The old worker's draft is rolled back with its refused outcome; the new claim still succeeds."""
    operation = submit_brief(workspace)
    [old] = claim_due_operations(limit=10, worker="old")
    taken = take_over(frozen)

    perform_claimed(old, worker="old")

    assert_owned_by_new_claim(operation)
    assert ReviewDraft.objects.count() == 0
    refusal = refusals(operation).get()
    assert refusal.actor == "old"
    assert refusal.message == "claim 1 no longer holds the operation; outcome not applied"
    assert list(Attempt.objects.values_list("fencing_token", "worker", "outcome")) == [(1, "old", "stale")]

    perform_claimed(taken, worker="new")

    operation.refresh_from_db()
    assert operation.state == "succeeded"
    assert ReviewDraft.objects.get().operation == operation
    assert Attempt.objects.get(fencing_token=2).outcome == "ok"


def test_it_refuses_a_stale_internal_failure(workspace, scripted_action, frozen):
    """A failure recorded under a lost claim schedules nothing either."""
    action = scripted_action()
    action.destination.answer(TransientError("busy"))
    operation = submit(workspace, action.name)
    [old] = claim_due_operations(limit=10, worker="old")
    take_over(frozen)

    perform_claimed(old, worker="old")

    assert_owned_by_new_claim(operation)
    assert operation.next_attempt_at is None
    assert refusals(operation).count() == 1
    assert not AuditEvent.objects.filter(operation=operation, kind="retry_scheduled").exists()


def test_it_does_not_call_the_destination_for_a_lost_external_claim(workspace, scripted_action, frozen):
    """An external try is begun only while the claim holds: a late worker never sends the request."""
    action = scripted_action(external=True)
    operation = submit(workspace, action.name)
    [old] = claim_due_operations(limit=10, worker="old")
    take_over(frozen)

    perform_claimed(old, worker="old")

    assert action.destination.calls == []
    assert_owned_by_new_claim(operation)
    assert refusals(operation).get().actor == "old"
    assert Attempt.objects.count() == 0


def in_flight_takeover(frozen):
    """While the old worker waits on the destination: its lease expires, the sweep marks the
    operation unknown, reconciliation finds nothing at the destination, and a new worker claims it."""

    def reply(operation):
        frozen.move_to(after_lease())
        sweep(now=after_lease())
        current = Operation.objects.get(pk=operation.pk)
        assert current.state == "unknown"
        transition_operation(current, to_state=State.RETRYING, actor="reconciler", kind="reconciled_absent")
        claim_due_operations(limit=10, worker="new")

    return reply


@pytest.mark.parametrize(
    "late_reply", [Success(external_id="crm-1"), TransientError("503")], ids=["success", "failure"]
)
def test_it_refuses_an_external_completion_that_arrives_after_a_takeover(
    workspace, scripted_action, frozen, late_reply
):
    """The destination's late answer to the old claim is recorded on its attempt, never on the
    operation, which the new claim owns."""
    action = scripted_action(external=True, honours_idempotency_keys=True)
    takeover = in_flight_takeover(frozen)

    def reply(operation):
        takeover(operation)
        if isinstance(late_reply, Exception):
            raise late_reply
        return late_reply

    action.destination.answer(reply)
    operation = submit(workspace, action.name)
    [old] = claim_due_operations(limit=10, worker="old")

    perform_claimed(old, worker="old")

    assert_owned_by_new_claim(operation)
    assert operation.external_id == ""
    assert refusals(operation).get().actor == "old"
    attempt = Attempt.objects.get(fencing_token=1)
    assert (attempt.worker, attempt.outcome, attempt.idempotency_key) == ("old", "stale", operation.key)
    # What the destination said is kept on the stale attempt, for reconciliation to use.
    assert attempt.external_id == getattr(late_reply, "external_id", "")
    assert not AuditEvent.objects.filter(operation=operation, kind__in=["succeeded", "retry_scheduled"]).exists()
