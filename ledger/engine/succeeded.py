"""Recording that claimed tries succeeded, under their claims' fencing tokens: one operation, a
set of them at once, or a set finished in its claim (``ledger.engine.claiming.finish_in_claim``). Each
write is a guarded transition that also requires the claim's token; the failures, and the fencing
machinery these share, are ``ledger.engine.fencing``'s.
"""

import json
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from ledger.core import announcements, audit_chain, configuration, tallies
from ledger.core.bulk_sql import update_each
from ledger.core.rows import dumps, model_row
from ledger.core.transitions import moved_in_sql, transition_many
from ledger.engine.attempts import attempt_number
from ledger.engine.fencing import StaleClaim, restore, snapshot
from ledger.models import Attempt, AuditEvent, Operation
from ledger.outcomes import Success
from ledger.states import State

# What a success clears: the lease, the next try, the last error.
_SUCCEEDED_CLEARS = {
    "lease_owner": "",
    "lease_expires_at": None,
    "next_attempt_at": None,
    "last_error_category": "",
    "last_error_message": "",
}


def record_success(operation, success: Success, *, attempt, worker, token) -> None:
    """Record one claimed try's success under the claim's ``token``, in the caller's transaction:
    ``attempt`` (written uncounted by the caller) is counted with the move. StaleClaim when the
    claim was lost."""
    transition_many(
        [operation],
        to_state=State.SUCCEEDED,
        actor=worker,
        kind="succeeded",
        tokens=[token],
        attempt_rows=[attempt],
        attempt_outcome=Attempt.Outcome.OK,
        raise_if_any_stays=StaleClaim,
        same=_SUCCEEDED_CLEARS,
        each=_results([success]),
    )


def record_successes(
    operations: list[Operation],
    successes: list[Success],
    *,
    worker: str,
    started_at: datetime | None = None,
    attempts: list[Attempt] | None = None,
) -> None:
    """Record ``succeeded`` for many claimed operations at once, in the caller's transaction: their
    ok Attempts in one statement (new ones from ``started_at`` for internal effects, or the begun
    ``attempts`` of external tries, finished), then ``transition_many``: one UPDATE guarded per row
    by (id, ``processing``, the claim's token) that also writes each row's result, the tallies and
    their audit events, appended last (the chain stays locked until the commit). Raises StaleClaim
    when any row is no longer held by its claim: the caller's rollback then undoes the whole set,
    effects included.
    """
    now = timezone.now()
    if len(successes) != len(operations):
        raise ValueError(f"{len(successes)} successes for {len(operations)} operations")
    if attempts is None:
        attempts = _ok_attempts(
            operations, successes, configuration.digests_for(operations), worker=worker, started_at=started_at, now=now
        )
    else:
        update_each(
            Attempt,
            [attempt.pk for attempt in attempts],
            match={},
            each={"external_id": [success.external_id for success in successes]},
            same={"finished_at": now, "outcome": Attempt.Outcome.OK},
            where={},
        )
        for attempt, success in zip(attempts, successes, strict=True):
            attempt.finished_at, attempt.outcome, attempt.external_id = now, Attempt.Outcome.OK, success.external_id
    transition_many(
        operations,
        to_state=State.SUCCEEDED,
        actor=worker,
        kind="succeeded",
        same=_SUCCEEDED_CLEARS,
        each=_results(successes),
        tokens=[operation.fencing_token for operation in operations],
        attempt_rows=attempts,
        attempt_outcome=Attempt.Outcome.OK,
        raise_if_any_stays=StaleClaim,
        now=now,
    )


def record_claimed_successes(
    operations: list[Operation], successes: list[Success], *, worker: str, now: datetime
) -> None:
    """Claim and record ``succeeded`` at once, for internal operations whose effects were just
    written in the caller's transaction, which also holds their rows locked since they were found
    due (``ledger.engine.processing``). The row goes from pending (or retrying) to succeeded in one guarded
    UPDATE that also takes the claim's token (old + 1), so the attempt is numbered as a claim's
    would be. ``processing`` is never visible: whoever reads the row sees it due (locked) until
    the commit, then succeeded; so that one real change is audited once (``succeeded`` from
    pending or retrying, the claim's token in its message), as the state table has it. Raises
    StaleClaim when any row was not claimable under its token (the caller's savepoint then undoes
    the set, effects included).

    The UPDATE, the Attempts and the audit events are one statement (``ledger_finish_claimed``,
    ``engine/sql/finish_claimed.sql``)."""
    before = [(operation, snapshot(operation)) for operation in operations]
    digests = configuration.digests_for(operations)
    try:
        # Lock order (docs/architecture.md): the tallies' rows before the audit chain, which the
        # write takes last (the operations' rows are the claim's since it found them).
        tallies.count_successes(operations, now)
        _finish_claimed_in_database(operations, successes, digests, worker=worker, now=now)
    except BaseException:
        for operation, values in before:
            restore(operation, values)
        raise
    moved_in_sql(
        operations,
        to_state=State.SUCCEEDED,
        kind="succeeded",
        configs=digests,
        now=now,
        same=_SUCCEEDED_CLEARS,
        each=_results(successes),
    )


def _finish_claimed_in_database(operations, successes, digests, *, worker, now) -> None:
    workspaces = sorted({operation.workspace_id for operation in operations})
    request = {
        "now": now,
        # The rows a worker's claim at `now` writes, but for what each operation decides.
        "attempt": model_row(Attempt(worker=worker, started_at=now, finished_at=now, outcome=Attempt.Outcome.OK)),
        "audit": model_row(AuditEvent(actor=worker, created_at=now)),
        "workspaces": workspaces,
        "operations": [
            {
                "id": operation.pk,
                "workspace_id": operation.workspace_id,
                "fencing_token": operation.fencing_token,
                "from_state": operation.state,
                "result": success.result,
                "external_id": success.external_id,
                "config_version_id": digest,
            }
            for operation, success, digest in zip(operations, successes, digests, strict=True)
        ],
    }
    # The function leaves each workspace's lanes locked and its events to seal here (the key never
    # reaches the database), inserted in the same transaction.
    with transaction.atomic(savepoint=False):
        with connection.cursor() as cursor:
            cursor.execute("SELECT ledger_finish_claimed(%s::jsonb)", [dumps(request)])
            answer = json.loads(cursor.fetchone()[0])  # Django's connections leave jsonb as text
        if answer["changed"] != len(operations):
            raise StaleClaim
        for heads, events in answer["chains"]:
            audit_chain.insert(heads, events)
        if any(announcements.may_announce(workspace_id) for workspace_id in workspaces):
            by_id = {operation.pk: operation for operation in operations}
            rows = [row for _, events in answer["chains"] for row in events]
            announcements.announce(announcements.of_rows(by_id, rows), now=now)
    for operation in operations:
        operation.attempts += 1
        operation.fencing_token += 1


def _results(successes: list[Success]) -> dict[str, list]:
    """What each success writes on its operation's row, one value per operation."""
    return {
        "result": [success.result for success in successes],
        "external_id": [success.external_id for success in successes],
    }


def _ok_attempts(
    operations: list[Operation], successes: list[Success], digests: list[str | None], *, worker: str, started_at, now
) -> list[Attempt]:
    """The ok Attempts of internal effects that just succeeded, one INSERT, each numbered by its claim
    and naming the configuration it ran under (``digests``, one per operation)."""
    return Attempt.objects.bulk_create(
        [
            Attempt(
                operation=operation,
                number=attempt_number(operation),
                fencing_token=operation.fencing_token,
                worker=worker,
                started_at=started_at,
                finished_at=now,
                outcome=Attempt.Outcome.OK,
                external_id=success.external_id,
                config_version_id=digest,
            )
            for operation, success, digest in zip(operations, successes, digests, strict=True)
        ]
    )
