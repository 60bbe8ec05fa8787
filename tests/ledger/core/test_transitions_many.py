"""``transition_many``: one guarded UPDATE moves a set of operations, each along an edge of the state
table, each under its own guard (its state as loaded, and the claim's fencing token when the caller
holds one); the rows that moved, and only those, are tallied, audited (one append) and logged."""

import logging
import re

import pytest
from django.db import connection, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from ledger.core import audit_verify, configuration, tallies
from ledger.core.transitions import IllegalTransition, transition_many, transition_operation
from ledger.engine.claiming import ClaimChanged, claim_due_operations
from ledger.engine.fencing import StaleClaim, renew_leases
from ledger.models import Attempt, AuditEvent, Operation, Tally
from ledger.states import State
from tests.ledger.conftest import START, submit_brief


def briefs(workspace, count, prefix="R"):
    return [submit_brief(workspace, request_id=f"{prefix}-{n}") for n in range(count)]


def put(operation, state: State, **fields) -> Operation:
    """Test setup: the row in ``state`` directly (not a transition), reloaded."""
    Operation.objects.filter(pk=operation.pk).update(state=state, **fields)
    return Operation.objects.get(pk=operation.pk)


def events_after(last_id):
    return list(
        AuditEvent.objects.filter(pk__gt=last_id)
        .order_by("id")
        .values_list("operation_id", "actor", "kind", "from_state", "to_state", "message")
    )


def last_event_id():
    return AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0


def counted():
    return {(row.name, row.labels): row.value for row in Tally.objects.all()}


def transitions_logged(caplog) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.getMessage() == "transition"]


def test_it_moves_every_row_in_one_update_and_audits_each_in_one_append(workspace, frozen, caplog):
    operations = briefs(workspace, 3)
    before = last_event_id()
    caplog.set_level(logging.INFO, logger="ledger")

    with CaptureQueriesContext(connection) as queries:
        moved = transition_many(
            operations,
            to_state=State.CANCELLED,
            actor="alice",
            kind="cancelled",
            message="not needed",
            same={"next_attempt_at": None},
        )

    assert moved == operations
    assert [operation.state for operation in operations] == ["cancelled"] * 3
    assert set(Operation.objects.filter(pk__in=[op.pk for op in operations]).values_list("state", flat=True)) == {
        "cancelled"
    }
    assert events_after(before) == [
        (op.pk, "alice", "cancelled", "pending", "cancelled", "not needed") for op in operations
    ]
    statements = [query["sql"] for query in queries.captured_queries]
    updates = [sql for sql in statements if sql.startswith('UPDATE "ledger_operation"')]
    appends = [sql for sql in statements if "ledger_audit_head" in sql]
    assert (len(updates), len(appends)) == (1, 1)
    assert [(record.key, record.kind) for record in transitions_logged(caplog)] == [
        (op.key, "cancelled") for op in operations
    ]
    assert audit_verify.verify_chains().broken is None


def test_it_takes_the_rows_then_the_tallies_then_the_audit_chain(workspace, frozen):
    """Lock order (docs/architecture.md "One lock order"): the UPDATE, its rows in id order
    whatever the order given, then the counters, then the chain, last."""
    operations = briefs(workspace, 3)

    with CaptureQueriesContext(connection) as queries:
        transition_many(list(reversed(operations)), to_state=State.CANCELLED, actor="alice", kind="cancelled")

    def taken(sql):
        if sql.startswith('UPDATE "ledger_operation"'):
            return "rows"
        if "ledger_tally" in sql:
            return "tallies"
        if "ledger_audit_head" in sql or "ledger_audit_insert" in sql:
            return "chain"
        return None

    statements = [query["sql"] for query in queries.captured_queries]
    # The chain: its head locked and read (ledger_audit_head), then the sealed events inserted.
    assert [taken(sql) for sql in statements if taken(sql)] == ["rows", "tallies", "chain", "chain"]
    [update] = [sql for sql in statements if taken(sql) == "rows"]
    values = update[update.index("(VALUES") :]
    assert [int(pk) for pk in re.findall(r"\((\d+)(?:::bigint)?, ", values)] == sorted(op.pk for op in operations)


def test_it_refuses_an_illegal_edge_and_writes_nothing(workspace, frozen):
    """One row of the set may not take the edge (needs_review -> processing): IllegalTransition
    before anything is written, the legal rows included: no row moved, no audit event, no tally."""
    pending, waiting = briefs(workspace, 2)
    waiting = put(waiting, State.NEEDS_REVIEW)
    before, tallied = last_event_id(), counted()

    with pytest.raises(IllegalTransition, match="needs_review -> processing"):
        transition_many(
            [pending, waiting],
            to_state=State.PROCESSING,
            actor="w1",
            kind="claimed",
            increment=("attempts", "fencing_token"),
        )

    assert dict(Operation.objects.filter(pk__in=[pending.pk, waiting.pk]).values_list("id", "state")) == {
        pending.pk: "pending",
        waiting.pk: "needs_review",
    }
    assert (pending.state, pending.attempts, pending.fencing_token) == ("pending", 0, 0)
    assert events_after(before) == []
    assert counted() == tallied


def test_it_refuses_an_illegal_edge_into_a_final_state_and_counts_nothing(workspace, frozen):
    """A final state counts a finished operation: a refused set counts none, not even its legal rows."""
    pending, done = briefs(workspace, 2)
    done = put(done, State.SUCCEEDED)
    tallied = counted()

    with pytest.raises(IllegalTransition, match="succeeded -> cancelled"):
        transition_many([pending, done], to_state=State.CANCELLED, actor="alice", kind="cancelled")

    assert Operation.objects.get(pk=pending.pk).state == "pending"
    assert counted() == tallied


def test_a_row_whose_guard_no_longer_matches_stays_while_the_others_move(workspace, frozen, caplog):
    """Another process superseded the second operation after this one loaded it: that row stays
    superseded, and is neither audited, tallied nor logged; the others are cancelled, each once."""
    first, second, third = briefs(workspace, 3)
    Operation.objects.filter(pk=second.pk).update(state=State.SUPERSEDED)
    before, tallied = last_event_id(), tallies.totals()
    caplog.set_level(logging.INFO, logger="ledger")

    moved = transition_many([first, second, third], to_state=State.CANCELLED, actor="alice", kind="cancelled")

    assert moved == [first, third]
    assert dict(Operation.objects.filter(pk__in=[first.pk, second.pk, third.pk]).values_list("id", "state")) == {
        first.pk: "cancelled",
        second.pk: "superseded",
        third.pk: "cancelled",
    }
    assert second.state == "pending"  # in memory as loaded: it did not move here
    assert [event[0] for event in events_after(before)] == [first.pk, third.pk]
    finished = ("finished", '{"action": "prepare-brief"}')
    assert tallies.totals()[finished] - tallied.get(finished, 0) == 2
    assert [record.key for record in transitions_logged(caplog)] == [first.key, third.key]


def test_it_moves_each_row_under_the_claim_the_caller_holds(workspace, frozen):
    """With ``tokens``, a row another worker claimed since (its token moved on) stays: the stale
    claim's success is not written, the others are."""
    claimed = claim_due_operations(limit=3, worker="w1") if briefs(workspace, 3) else []
    taken = claimed[1]
    Operation.objects.filter(pk=taken.pk).update(fencing_token=taken.fencing_token + 1, lease_owner="w2")
    before = last_event_id()

    moved = transition_many(
        claimed,
        to_state=State.SUCCEEDED,
        actor="w1",
        kind="succeeded",
        tokens=[operation.fencing_token for operation in claimed],
        same={"lease_owner": "", "lease_expires_at": None},
        each={"external_id": ["a", "b", "c"]},
    )

    assert moved == [claimed[0], claimed[2]]
    stored = {
        row["id"]: row
        for row in Operation.objects.filter(pk__in=[op.pk for op in claimed]).values(
            "id", "state", "external_id", "lease_owner"
        )
    }
    assert [stored[op.pk]["state"] for op in claimed] == ["succeeded", "processing", "succeeded"]
    assert [stored[op.pk]["external_id"] for op in claimed] == ["a", "", "c"]
    assert stored[taken.pk]["lease_owner"] == "w2"
    assert [event[0] for event in events_after(before)] == [claimed[0].pk, claimed[2].pk]


def test_it_raises_the_callers_exception_and_keeps_nothing_when_a_row_stays(workspace, frozen):
    """``raise_if_any_stays``: the set is all or nothing. The exception leaves the transaction,
    which rolls back the rows that did move; nothing is audited or tallied."""
    briefs(workspace, 3)
    claimed = claim_due_operations(limit=3, worker="w1")
    Operation.objects.filter(pk=claimed[2].pk).update(fencing_token=99)
    before, tallied = last_event_id(), counted()

    with pytest.raises(StaleClaim, match="1 of 3 operations changed under their guard"), transaction.atomic():
        transition_many(
            claimed,
            to_state=State.SUCCEEDED,
            actor="w1",
            kind="succeeded",
            tokens=[operation.fencing_token for operation in claimed],
            raise_if_any_stays=StaleClaim,
        )

    assert set(Operation.objects.filter(pk__in=[op.pk for op in claimed]).values_list("state", flat=True)) == {
        "processing"
    }
    assert [operation.state for operation in claimed] == ["processing"] * 3
    assert events_after(before) == []
    assert counted() == tallied


def test_it_writes_each_rows_own_values_increments_and_messages(workspace, frozen):
    """A claim's shape: each row's token grows by one, its message names it, its lease is the set's."""
    first, second = briefs(workspace, 2)
    second = put(second, State.RETRYING, fencing_token=4, attempts=2)
    before = last_event_id()

    transition_many(
        [first, second],
        to_state=State.PROCESSING,
        actor="w1",
        kind="claimed",
        increment=("attempts", "fencing_token"),
        same={"lease_owner": "w1"},
        tokens=[first.fencing_token, second.fencing_token],
        message=[f"claim {op.fencing_token + 1}" for op in (first, second)],
    )

    stored = {
        row[0]: row[1:]
        for row in Operation.objects.filter(pk__in=[first.pk, second.pk]).values_list(
            "id", "state", "attempts", "fencing_token", "lease_owner"
        )
    }
    assert stored == {first.pk: ("processing", 1, 1, "w1"), second.pk: ("processing", 3, 5, "w1")}
    assert [(first.attempts, first.fencing_token), (second.attempts, second.fencing_token)] == [(1, 1), (3, 5)]
    assert events_after(before) == [
        (first.pk, "w1", "claimed", "pending", "processing", "claim 1"),
        (second.pk, "w1", "claimed", "retrying", "processing", "claim 5"),
    ]


def test_a_move_that_finishes_a_try_counts_it_with_the_move_and_names_it(workspace, frozen, caplog):
    """``attempt_rows`` and ``attempt_outcome``: each event names its attempt, each log line the
    configuration the attempt ran under, and the tries are counted with the finished operations
    in the one INSERT of the counters."""
    briefs(workspace, 2)
    claimed = claim_due_operations(limit=2, worker="w1")
    attempts = [
        Attempt.objects.create(
            operation=op,
            number=op.fencing_token,
            fencing_token=op.fencing_token,
            worker="w1",
            started_at=START,
            finished_at=START,
            outcome="ok",
            config_version_id=configuration.digest_for(op),
        )
        for op in claimed
    ]
    caplog.set_level(logging.INFO, logger="ledger")
    caplog.clear()
    before, tallied = last_event_id(), tallies.totals()

    with CaptureQueriesContext(connection) as queries:
        transition_many(
            claimed,
            to_state=State.SUCCEEDED,
            actor="w1",
            kind="succeeded",
            attempt_rows=attempts,
            attempt_outcome="ok",
            tokens=[op.fencing_token for op in claimed],
        )

    assert list(AuditEvent.objects.filter(pk__gt=before).order_by("id").values_list("attempt_id", flat=True)) == [
        attempt.pk for attempt in attempts
    ]
    assert len([q for q in queries.captured_queries if "ledger_tally" in q["sql"]]) == 1
    ok = ("attempts", '{"action": "prepare-brief", "destination": "internal", "outcome": "ok"}')
    assert tallies.totals()[ok] - tallied.get(ok, 0) == 2
    assert [(record.to, record.attempts, record.config_version) for record in transitions_logged(caplog)] == [
        ("succeeded", 1, attempt.config_version_id[:12]) for attempt in attempts
    ]


def test_a_set_of_none_writes_nothing(db, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert transition_many([], to_state=State.CANCELLED, actor="alice", kind="cancelled") == []


def test_it_refuses_lists_that_do_not_match_the_operations(workspace, frozen):
    operations = briefs(workspace, 2)
    with pytest.raises(ValueError, match="^1 messages for 2 operations$"):
        transition_many(operations, to_state=State.CANCELLED, actor="alice", kind="cancelled", message=["one"])
    with pytest.raises(ValueError, match="^1 external_id for 2 operations$"):
        transition_many(
            operations, to_state=State.CANCELLED, actor="alice", kind="cancelled", each={"external_id": ["one"]}
        )
    assert set(Operation.objects.values_list("state", flat=True)) == {"pending"}


def test_transition_operation_is_its_one_row_case(workspace, frozen):
    """Same answers as before: True and moved, or False and nothing written."""
    operation, stale = briefs(workspace, 2)
    stale_copy = Operation.objects.get(pk=stale.pk)
    transition_operation(stale, to_state=State.CANCELLED, actor="alice", kind="cancelled")

    assert (
        transition_operation(operation, to_state=State.CANCELLED, actor="alice", kind="cancelled", next_attempt_at=None)
        is True
    )
    assert transition_operation(stale_copy, to_state=State.SUPERSEDED, actor="bob", kind="superseded") is False
    assert Operation.objects.get(pk=stale.pk).state == "cancelled"


def test_a_claim_of_a_hundred_takes_as_many_statements_as_a_claim_of_five(workspace, frozen):
    briefs(workspace, 105)
    with CaptureQueriesContext(connection) as five:
        assert len(claim_due_operations(limit=5, worker="w1")) == 5
    with CaptureQueriesContext(connection) as hundred:
        assert len(claim_due_operations(limit=100, worker="w1")) == 100
    assert len(hundred.captured_queries) == len(five.captured_queries)


def test_a_claim_audits_and_logs_each_operation_it_takes(workspace, frozen, caplog):
    operations = briefs(workspace, 3)
    caplog.set_level(logging.INFO, logger="ledger")

    claim_due_operations(limit=3, worker="w1")

    assert [(record.key, record.kind, getattr(record, "from"), record.to) for record in transitions_logged(caplog)] == [
        (op.key, "claimed", "pending", "processing") for op in operations
    ]
    assert list(AuditEvent.objects.filter(kind="claimed").order_by("id").values_list("operation_id", "message")) == [
        (op.pk, "claim 1") for op in operations
    ]


def test_a_claim_whose_row_changed_under_its_lock_keeps_nothing(workspace, frozen, monkeypatch):
    """Only a bug could change a row the claim holds locked; if one did, the claim is rolled back."""
    from ledger.engine import claiming

    briefs(workspace, 2)
    found = claiming.transition_many

    def behind_the_lock(operations, **how):
        Operation.objects.filter(pk=operations[0].pk).update(fencing_token=7)
        return found(operations, **how)

    monkeypatch.setattr(claiming, "transition_many", behind_the_lock)

    with pytest.raises(ClaimChanged):
        claim_due_operations(limit=2, worker="w1")

    assert set(Operation.objects.values_list("state", flat=True)) == {"pending"}
    assert not AuditEvent.objects.filter(kind="claimed").exists()


def test_renewing_leases_moves_only_the_leases_of_rows_still_held(workspace, frozen):
    briefs(workspace, 2)
    claimed = claim_due_operations(limit=2, worker="w1")
    Operation.objects.filter(pk=claimed[1].pk).update(fencing_token=F("fencing_token") + 1)  # taken over

    assert renew_leases(claimed, expires_at=START) == 1
    assert Operation.objects.get(pk=claimed[0].pk).lease_expires_at == START
    assert {operation.state for operation in Operation.objects.all()} == {"processing"}
