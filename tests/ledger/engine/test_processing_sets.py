"""Internal operations of a claimed batch complete as one set: once one of them succeeded on its
own, the rest write their effects, ok Attempts, fenced ``succeeded`` transitions and audit events
in one transaction. Anything that stops the set (a claim lost meanwhile, an effect that fails, a
lost connection) keeps nothing of it, and the operations are performed one at a time instead, where
each outcome is recorded on its own."""

import logging

import pytest

from ledger.actions.prepare_brief import PrepareBrief
from ledger.core import audit_verify
from ledger.core.transitions import transition_operation
from ledger.engine import faults
from ledger.engine.claiming import claim_due_operations
from ledger.engine.processing import process_due_operations
from ledger.models import Attempt, AuditEvent, Operation, ReviewDraft
from ledger.states import State
from tests.faults.qcluster import assert_each_performed_exactly_once
from tests.ledger.conftest import START, submit_brief

# The claim, the first operation on its own, then the set: whatever the batch's size.
# Savepoints included, and per transaction an INSERT .. ON CONFLICT of the configuration
# (ledger.core.configuration) and of the counters (ledger.core.tallies: a try's outcome is counted with
# the move that records it, ledger.core.transitions.transition_many, so one for the first operation too);
# the claim reads the action's health too, to tell whether the set may finish in the claim; the
# claim sets its planning without a sort and back (ledger.engine.claiming), two more; each audit
# append is two (the chain's head locked and read, the sealed events inserted: ledger.core.audit_chain).
QUERIES_PER_BATCH = 30
# A batch of an action known to work, finished in its claim's one transaction: the due rows, the
# pause switches, the health, a savepoint, the effects, the configuration, the claims with their
# attempts and the chain's head (one statement, ledger_finish_claimed), the audit events sealed here,
# the counters, the commit, the health noted; the claim's planning set without a sort and back.
QUERIES_PER_BATCH_IN_CLAIM = 14


def briefs(workspace, count):
    return [submit_brief(workspace, request_id=f"R-{n}") for n in range(count)]


@pytest.fixture
def perform_many_calls(monkeypatch):
    """How many operations each call of PrepareBrief.perform_many got (its perform calls it with one)."""
    calls = []
    perform_many = PrepareBrief.perform_many

    def counted(self, operations):
        calls.append(len(operations))
        return perform_many(self, operations)

    monkeypatch.setattr(PrepareBrief, "perform_many", counted)
    return calls


def assert_succeeded_once_each(operations, came_from="processing"):
    """``came_from``: the state its one ``succeeded`` event moved it from (pending when its set
    was finished in its claim, never processing in a committed state)."""
    for operation in operations:
        operation.refresh_from_db()
        draft = ReviewDraft.objects.get(operation=operation)
        attempt = Attempt.objects.get(operation=operation)
        assert operation.state == "succeeded"
        assert operation.external_id == f"draft-{draft.pk}"
        assert operation.result == {
            "draft_id": f"draft-{draft.pk}",
            "title": "Review renewal options",
            "owner": "ops",
            "state": "awaiting_review",
        }
        assert (operation.lease_owner, operation.lease_expires_at, operation.last_error) == ("", None, None)
        assert (attempt.number, attempt.fencing_token, attempt.outcome, attempt.external_id) == (
            1,
            operation.fencing_token,
            "ok",
            operation.external_id,
        )
        succeeded = AuditEvent.objects.get(operation=operation, kind="succeeded")
        assert (succeeded.from_state, succeeded.to_state, succeeded.attempt) == (came_from, "succeeded", attempt)


def test_it_completes_the_rest_of_the_batch_as_one_set(workspace, frozen, perform_many_calls):
    """The first operation runs on its own; the other four are one perform_many and one transaction.
    Each still has exactly one draft, one ok attempt and one `succeeded` event, and the audit chain
    holds."""
    operations = briefs(workspace, 5)

    assert process_due_operations(worker="w1") == 5

    assert perform_many_calls == [1, 4]
    assert_succeeded_once_each(operations)
    attempt = Attempt.objects.get(operation=operations[-1])
    assert (attempt.worker, attempt.started_at, attempt.finished_at) == ("w1", START, START)
    assert AuditEvent.objects.get(operation=operations[-1], kind="succeeded").actor == "w1"
    assert audit_verify.verify_chains().broken is None


def test_an_action_that_just_worked_completes_the_next_batch_as_one_set_at_once(workspace, frozen, perform_many_calls):
    """Once a batch of an action all succeeded, the next batch sends no operation ahead alone."""
    briefs(workspace, 3)
    process_due_operations(worker="w1")
    later = [submit_brief(workspace, request_id=f"L-{n}") for n in range(4)]

    process_due_operations(worker="w1")

    assert perform_many_calls == [1, 2, 4]
    assert_succeeded_once_each(later, came_from="pending")


def test_an_action_not_seen_working_for_a_while_sends_one_operation_ahead_again(workspace, frozen, perform_many_calls):
    from datetime import timedelta

    from ledger.engine.destination_health import WORKING_WINDOW

    briefs(workspace, 3)
    process_due_operations(worker="w1")
    frozen.move_to(START + WORKING_WINDOW + timedelta(seconds=1))
    [submit_brief(workspace, request_id=f"L-{n}") for n in range(4)]

    process_due_operations(worker="w1")

    assert perform_many_calls == [1, 2, 1, 3]


@pytest.mark.parametrize("size", [5, 50])
def test_it_completes_a_batch_in_the_same_number_of_queries_whatever_its_size(
    workspace, django_assert_max_num_queries, size
):
    """Statements per batch do not grow with it (before sets: 8 per operation, 408 for 50)."""
    operations = briefs(workspace, size)
    with django_assert_max_num_queries(QUERIES_PER_BATCH):
        assert process_due_operations(worker="w1") == size

    assert Operation.objects.filter(pk__in=[op.pk for op in operations], state="succeeded").count() == size


def take_over(operation):
    """Another worker owns ``operation`` now: its lease ran out, the sweep freed it, it was claimed."""
    current = Operation.objects.get(pk=operation.pk)
    transition_operation(
        current,
        to_state=State.PENDING,
        actor="sweep",
        kind="lease_expired",
        fencing_token=current.fencing_token,
        lease_owner="",
        lease_expires_at=None,
    )
    [taken] = claim_due_operations(limit=1, worker="new")
    assert taken.pk == operation.pk


def test_it_falls_back_to_one_at_a_time_when_one_claim_of_the_set_was_lost(
    workspace, frozen, monkeypatch, perform_many_calls
):
    """While the first operation runs, another worker takes the third over. The set finds that row
    under another token and keeps nothing; one at a time, the third's completion is refused (its
    draft rolled back, audited), and the others succeed."""
    operations = briefs(workspace, 4)
    lost = operations[2]
    perform = PrepareBrief.perform

    def perform_while_a_claim_is_lost(self, operation):
        if operation.pk == operations[0].pk:
            take_over(lost)
        return perform(self, operation)

    monkeypatch.setattr(PrepareBrief, "perform", perform_while_a_claim_is_lost)

    process_due_operations(worker="old")

    assert perform_many_calls == [1, 3, 1, 1, 1]  # the set of three was tried, then one at a time
    assert_succeeded_once_each([op for op in operations if op is not lost])
    lost.refresh_from_db()
    assert (lost.state, lost.lease_owner, lost.fencing_token, lost.result) == ("processing", "new", 2, None)
    assert not ReviewDraft.objects.filter(operation=lost).exists()
    assert list(Attempt.objects.filter(operation=lost).values_list("fencing_token", "worker", "outcome")) == [
        (1, "old", "stale")
    ]
    refusal = AuditEvent.objects.get(operation=lost, kind="stale_completion_refused")
    assert (refusal.actor, refusal.message) == ("old", "claim 1 no longer holds the operation; outcome not applied")
    assert not AuditEvent.objects.filter(operation=lost, kind="succeeded").exists()


def test_it_falls_back_to_one_at_a_time_when_one_effect_of_the_set_fails(workspace, frozen, caplog, perform_many_calls):
    """A draft that cannot be written (here: one already exists) fails the set's insert; one at a
    time, that operation fails on its own (transient, rolled back) and the others succeed."""
    operations = briefs(workspace, 4)
    failing = operations[2]
    ReviewDraft.objects.create(operation=failing, workspace=workspace, title="left behind", owner="ops")

    with caplog.at_level(logging.INFO, logger="ledger"):
        process_due_operations(worker="w1")

    assert perform_many_calls == [1, 3, 1, 1, 1]
    assert "performing 3 prepare-brief operations as a set failed (IntegrityError)" in caplog.text
    assert_succeeded_once_each([op for op in operations if op is not failing])
    failing.refresh_from_db()
    assert (failing.state, failing.last_error_category) == ("retrying", "transient")
    assert ReviewDraft.objects.get(operation=failing).title == "left behind"
    assert list(Attempt.objects.filter(operation=failing).values_list("outcome", "error_type")) == [
        ("transient", "IntegrityError")
    ]


def test_it_performs_one_at_a_time_while_none_has_succeeded(workspace, frozen, perform_many_calls):
    """An action that is failing meets the batch one operation at a time: no set is tried until
    one operation succeeded on its own."""
    operations = briefs(workspace, 4)
    for operation in operations[:2]:
        ReviewDraft.objects.create(operation=operation, workspace=workspace, title="left behind", owner="ops")

    process_due_operations(worker="w1")

    assert perform_many_calls == [1, 1, 1, 1]
    states = [Operation.objects.get(pk=operation.pk).state for operation in operations]
    assert states == ["retrying", "retrying", "succeeded", "succeeded"]


@pytest.mark.django_db(transaction=True)
def test_it_records_the_set_one_at_a_time_when_its_commit_loses_the_connection(
    workspace, monkeypatch, tmp_path, caplog
):
    """The connection is terminated inside the set's transaction, before its commit (PostgreSQL):
    nothing of it was kept, so on a fresh connection each operation is performed and recorded on
    its own, once."""
    operations = briefs(workspace, 4)
    marker = tmp_path / "terminated"
    perform_many = PrepareBrief.perform_many

    def lose_the_connection_of_the_set(self, batch):
        if len(batch) > 1:
            monkeypatch.setenv("OPSCONSOLE_TERMINATE_AT", faults.TERMINATE_POINTS[0])
            monkeypatch.setenv("OPSCONSOLE_CRASH_ONCE_FILE", str(marker))
        return perform_many(self, batch)

    monkeypatch.setattr(PrepareBrief, "perform_many", lose_the_connection_of_the_set)

    with caplog.at_level(logging.WARNING, logger="ledger"):
        assert process_due_operations(worker="w1") == 4

    assert marker.exists(), "the set's transaction did not lose its connection"
    assert "database connection lost recording the outcomes of 3 operations" in caplog.text
    assert_each_performed_exactly_once([operation.pk for operation in operations])
    assert AuditEvent.objects.filter(kind="succeeded").count() == 4
    assert not AuditEvent.objects.filter(kind__in=["stale_completion_refused", "retry_scheduled"]).exists()
    assert audit_verify.verify_chains().broken is None


def warm(workspace):
    """Run one batch, so that prepare-brief is known to work (``ledger.engine.destination_health``)."""
    briefs(workspace, 2)
    process_due_operations(worker="w0")


@pytest.mark.parametrize("size", [5, 50])
def test_a_batch_of_an_action_known_to_work_finishes_in_its_claim(
    workspace, frozen, perform_many_calls, django_assert_max_num_queries, size
):
    """Effects, claims, attempts and ``succeeded`` commit in the claim's transaction: one
    perform_many, half the statements of a claim and a set apart, and each operation's one change
    (pending -> succeeded) is audited once, under claim 1."""
    warm(workspace)
    operations = [submit_brief(workspace, request_id=f"L-{n}") for n in range(size)]

    with django_assert_max_num_queries(QUERIES_PER_BATCH_IN_CLAIM):
        assert process_due_operations(worker="w1") == size

    assert perform_many_calls == [1, 1, size]
    assert_succeeded_once_each(operations, came_from="pending")
    for operation in operations:
        events = list(
            AuditEvent.objects.filter(operation=operation)
            .order_by("id")
            .values_list("kind", "from_state", "to_state", "actor", "message")
        )
        assert events[1:] == [("succeeded", "pending", "succeeded", "w1", "claim 1, finished in it")]
        assert operation.attempts == 1
    assert audit_verify.verify_chains().broken is None


def test_a_set_that_fails_in_its_claim_is_claimed_and_worked_through_instead(
    workspace, frozen, caplog, perform_many_calls
):
    """One draft cannot be written: the claim's savepoint keeps nothing of the set, the operations
    are claimed as usual, the set fails again there, and one at a time the failing one is retried
    later while the others succeed, each once."""
    warm(workspace)
    operations = [submit_brief(workspace, request_id=f"L-{n}") for n in range(4)]
    failing = operations[1]
    ReviewDraft.objects.create(operation=failing, workspace=workspace, title="left behind", owner="ops")

    with caplog.at_level(logging.INFO, logger="ledger"):
        assert process_due_operations(worker="w1") == 4

    assert "performing 4 prepare-brief operations in their claim failed (IntegrityError)" in caplog.text
    assert perform_many_calls == [1, 1, 4, 4, 1, 1, 1, 1]
    assert_succeeded_once_each([op for op in operations if op is not failing])
    failing.refresh_from_db()
    assert (failing.state, failing.last_error_category, failing.attempts) == ("retrying", "transient", 1)
    assert list(AuditEvent.objects.filter(operation=failing).order_by("id").values_list("kind", flat=True)) == [
        "reserved",
        "claimed",
        "retry_scheduled",
    ]
    assert audit_verify.verify_chains().broken is None


def test_a_stale_row_keeps_the_whole_set_out_of_the_claim(workspace, frozen, monkeypatch, perform_many_calls):
    """The claim's UPDATE is guarded by each row's state and token: a row that is no longer
    claimable under its token (here: changed behind the lock, as only a bug could) makes the
    savepoint keep nothing, effects included; the batch is then claimed and done as usual."""
    from ledger.core import configuration

    warm(workspace)
    operations = [submit_brief(workspace, request_id=f"L-{n}") for n in range(3)]
    digests_for = configuration.digests_for
    changed = []

    def behind_the_lock(claimed):
        # Just before the guarded UPDATE of the set finished in its claim (in SQL on PostgreSQL,
        # here elsewhere), once.
        if not changed:
            changed.append(Operation.objects.filter(pk=operations[0].pk).update(fencing_token=7))
        return digests_for(claimed)

    monkeypatch.setattr(configuration, "digests_for", behind_the_lock)

    assert process_due_operations(worker="w1") == 3

    assert perform_many_calls == [1, 1, 3, 3]
    assert ReviewDraft.objects.filter(operation__in=operations).count() == 3
    assert set(Operation.objects.filter(pk__in=[op.pk for op in operations]).values_list("state", flat=True)) == {
        "succeeded"
    }
