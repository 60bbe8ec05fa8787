"""A set of internal operations finished in its claim is recorded by one statement
(``ledger_finish_claimed``, migrations 0029 and 0044): each operation, its attempt and one audit
event for its one real change (pending or retrying -> succeeded, the claim's token in its message),
across workspaces (one chain each) and from pending and retrying alike."""

from datetime import timedelta

import pytest
from django.db import transaction

from ledger.core import accounts, audit_verify
from ledger.engine import fencing, succeeded
from ledger.engine.processing import process_due_operations
from ledger.models import Attempt, AuditEvent, Operation, ReviewDraft
from ledger.outcomes import Success
from ledger.states import State
from tests.ledger.conftest import START, submit_brief


def written(workspaces):
    """What finishing wrote, without ids and per-run values: rows named by their request id."""
    operations = Operation.objects.filter(workspace__in=workspaces).exclude(key__contains=":warm:").order_by("id")
    names = {operation.pk: (operation.workspace.slug, operation.payload["request_id"]) for operation in operations}
    drafts = {
        f"draft-{draft.pk}": names[draft.operation_id] for draft in ReviewDraft.objects.filter(operation__in=operations)
    }
    return {
        "operations": [
            (
                names[o.pk],
                o.state,
                o.attempts,
                o.fencing_token,
                o.lease_owner,
                o.lease_expires_at,
                o.next_attempt_at,
                o.last_error_category,
                o.last_error_message,
                drafts[o.external_id],
                o.result["title"],
            )
            for o in operations
        ],
        "attempts": sorted(
            (
                names[a.operation_id],
                a.number,
                a.fencing_token,
                a.worker,
                a.outcome,
                drafts[a.external_id],
                a.config_version_id,
                a.started_at == a.finished_at == START,
            )
            for a in Attempt.objects.filter(operation__in=operations)
        ),
        "audit": [
            (
                names[e.operation_id],
                e.actor,
                e.kind,
                e.from_state,
                e.to_state,
                e.message,
                names[e.attempt.operation_id] if e.attempt else None,
                e.created_at == START,
            )
            for e in AuditEvent.objects.filter(operation__in=operations, kind__in=["claimed", "succeeded"])
            .select_related("attempt")
            .order_by("id")
        ],
    }


def finish_two_workspaces(slugs):
    """Briefs in two workspaces, one of them retrying, finished in one claim (after a warm-up
    batch, so prepare-brief is known to work)."""
    workspaces = [accounts.create_workspace(slug=slug, approved_owners=["ops"], actor="test")[0] for slug in slugs]
    submit_brief(workspaces[0], request_id="warm")
    process_due_operations(worker="w0")
    for n in range(3):
        for workspace in workspaces:
            submit_brief(workspace, request_id=f"R-{n}")
    retried = Operation.objects.get(workspace=workspaces[1], key__contains=":R-1:")
    Operation.objects.filter(pk=retried.pk).update(
        state=State.RETRYING, next_attempt_at=START - timedelta(seconds=1), fencing_token=4, attempts=2
    )

    assert process_due_operations(worker="w1") == 6

    return workspaces


def test_one_statement_finishes_a_set_across_workspaces_from_pending_and_retrying(db, frozen):
    workspaces = finish_two_workspaces(["a", "b"])

    found = written(workspaces)

    retried = ("b", "R-1")  # retrying after two tries, under token 4: its claim takes 5
    names = [(slug, f"R-{n}") for n in range(3) for slug in ("a", "b")]
    assert found["operations"] == [
        (
            name,
            "succeeded",
            3 if name == retried else 1,
            5 if name == retried else 1,
            "",
            None,
            None,
            "",
            "",
            name,
            "Review renewal options",
        )
        for name in names
    ]
    configs = {config for *_, config, _ in found["attempts"]}
    assert len(configs) == 1
    assert None not in configs
    assert found["attempts"] == [
        (name, 5 if name == retried else 1, 5 if name == retried else 1, "w1", "ok", name, *configs, True)
        for name in sorted(names)
    ]
    assert found["audit"] == [
        (
            name,
            "w1",
            "succeeded",
            "retrying" if name == retried else "pending",
            "succeeded",
            f"claim {5 if name == retried else 1}, finished in it",
            name,
            True,
        )
        for name in sorted(names)
    ]
    assert audit_verify.verify_chains().broken is None


def test_a_row_not_claimable_under_its_token_writes_nothing(db, frozen, workspace):
    """The statement checks every row before it writes: one that moved under the claim makes it
    write no attempt and no event, and the caller is told (StaleClaim)."""
    operations = [submit_brief(workspace, request_id=f"R-{n}") for n in range(2)]
    Operation.objects.filter(pk=operations[1].pk).update(fencing_token=9)
    attempts_before, events_before = Attempt.objects.count(), AuditEvent.objects.count()
    done = [Success(result={"n": n}, external_id=f"x-{n}") for n in range(2)]

    with pytest.raises(fencing.StaleClaim), transaction.atomic():  # the claim's savepoint
        succeeded.record_claimed_successes(operations, done, worker="w1", now=START)

    assert (Attempt.objects.count(), AuditEvent.objects.count()) == (attempts_before, events_before)
    in_memory = [(o.state, o.fencing_token, o.attempts) for o in operations]
    assert in_memory == [("pending", 0, 0), ("pending", 0, 0)]
    for operation in operations:
        operation.refresh_from_db()
    assert [(o.state, o.fencing_token, o.attempts) for o in operations] == [("pending", 0, 0), ("pending", 9, 0)]
