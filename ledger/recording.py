"""Recording what a claimed try came to, under the claim's fencing token.

A failure (classified into the next state: retrying with backoff, unknown, needs_review) or a
refused stale completion, and the Attempt rows of tries; successes are ``ledger.successes``'.
Every write is a guarded transition that also requires the claim's token, and ``commit_outcome``
(for a set, ``commit_outcomes``) keeps the operations in memory true to the database when the
transaction that records an outcome fails.
"""

import logging
from datetime import datetime, timedelta
from functools import partial

from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from ledger import configuration, nudges, tallies
from ledger.actions import ActionDefinition
from ledger.bulk import update_each
from ledger.models import Attempt, AuditEvent, Operation
from ledger.outcomes import AmbiguousError, OutcomeError, PermanentError, TransientError
from ledger.retry import retry_delay
from ledger.services import record_audit_event, transition_operation
from ledger.states import State

logger = logging.getLogger("ledger")

RETRY_BUDGET_WINDOW = timedelta(hours=1)


class StaleClaim(Exception):
    """The claim's fencing token no longer matches: someone else owns the operation now."""


# What the engine changes on an operation while a claim holds it.
_ENGINE_FIELDS = ("state", "attempts", "fencing_token", "lease_owner", "lease_expires_at", "next_attempt_at",
                  "deadline", "result", "external_id", "last_error_category", "last_error_message", "updated_at")


def commit_outcome(operation: Operation, write):
    """Run ``write``, the transaction that records this claim's outcome, and keep the operation in
    memory true to the database whatever happens to it.

    ``transition_operation`` applies a move to the object as soon as its UPDATE ran; if the
    transaction then fails (a terminated connection, at the commit or before), the object would
    claim a state the database never stored, and the next step would start from it (``succeeded
    -> retrying``). So a failed ``write`` leaves the object as it was before. When the failure was
    the connection itself, the database is asked on a fresh connection: if the row is still ours
    and unrecorded, ``write`` runs once more; if it moved (the commit went through after all, or
    the claim was lost), the object is reloaded and there is nothing left to write.
    """
    token = operation.fencing_token
    before = snapshot(operation)
    try:
        return write()
    except (OperationalError, InterfaceError):
        restore(operation, before)
        logger.warning("database connection lost recording the outcome of %s; writing it again",
                       operation.key, exc_info=True)
    except BaseException:
        restore(operation, before)
        raise
    connection.close_if_unusable_or_obsolete()
    if not Operation.objects.filter(pk=operation.pk, state=State.PROCESSING, fencing_token=token).exists():
        operation.refresh_from_db(fields=_ENGINE_FIELDS)
        return None
    try:
        return write()
    except BaseException:
        restore(operation, before)
        raise


def commit_outcomes(operations: list[Operation], write) -> bool:
    """Run ``write``, the one transaction that records the outcomes of many claimed operations;
    True when it committed. Like ``commit_outcome``, a failed ``write`` leaves every operation in
    memory as it was. When the failure was the connection, a fresh connection tells whether the
    commit went through after all: if any row is still held, unrecorded, by its claim, nothing was
    written (one transaction) and False sends the caller to record them one at a time; otherwise
    the operations are reloaded. Any other failure is raised.
    """
    before = [(operation, snapshot(operation)) for operation in operations]
    try:
        write()
        return True
    except (OperationalError, InterfaceError):
        for operation, values in before:
            restore(operation, values)
        logger.warning("database connection lost recording the outcomes of %d operations; recording them "
                       "one at a time", len(operations), exc_info=True)
    except BaseException:
        for operation, values in before:
            restore(operation, values)
        raise
    connection.close_if_unusable_or_obsolete()
    held = Q()
    for operation in operations:
        held |= Q(pk=operation.pk, fencing_token=operation.fencing_token)
    if Operation.objects.filter(held, state=State.PROCESSING).exists():
        return False
    for operation in operations:
        operation.refresh_from_db(fields=_ENGINE_FIELDS)
    return True


def update_held(operations: list[Operation], *, each: dict[str, list] | None = None, **same) -> int:
    """One UPDATE of the rows of ``operations`` still ``processing`` under the token of the claim
    in hand (a row someone else took over is left alone): the ``same`` columns get one value for
    all, the ``each`` columns one value per operation, in order. Returns how many rows changed.

    The ORM spells this as an OR of (id, token) per row and a CASE per column, and building those
    expressions costs about a millisecond per row; here the rows travel as one VALUES list.
    """
    return update_each(Operation, [operation.pk for operation in operations],
                        match={"fencing_token": [operation.fencing_token for operation in operations]},
                        each=each or {}, same=same, where={"state": State.PROCESSING})


def snapshot(operation: Operation) -> dict:
    """What the engine may change on ``operation`` (for ``restore``, when a write fails)."""
    return {name: getattr(operation, name) for name in _ENGINE_FIELDS}


def restore(operation: Operation, values: dict) -> None:
    for name, value in values.items():
        setattr(operation, name, value)


def attempt_number(operation: Operation) -> int:
    """The number of the try a claim begins: its fencing token, which every claim of the operation
    takes the next of, across replays. ``attempts`` restarts at 0 when a person replays (it counts
    the tries toward the action's limit), so numbered by it the first try after a replay was 1 again."""
    return operation.fencing_token


def new_attempt(operation, *, worker, started_at, outcome, error: Exception | None = None,
             external_id: str = "") -> Attempt:
    tallies.count_attempts([(operation, outcome)])
    return Attempt.objects.create(
        operation=operation, number=attempt_number(operation), fencing_token=operation.fencing_token,
        worker=worker, started_at=started_at, finished_at=timezone.now(), outcome=outcome,
        external_id=external_id, config_version_id=configuration.digest_for(operation), **_error_fields(error),
    )


def finish_attempt(attempt: Attempt, outcome: str, error: Exception | None = None) -> None:
    tallies.count_attempts([(attempt.operation, outcome)])
    attempt.finished_at = timezone.now()
    attempt.outcome = outcome
    for name, value in _error_fields(error).items():
        setattr(attempt, name, value)
    attempt.save(update_fields=["finished_at", "outcome", "error_type", "error_message", "http_status",
                                "external_id"])


def _error_fields(error: Exception | None) -> dict:
    if error is None:
        return {}
    return {
        "error_type": type(error).__qualname__[:200],
        "error_message": _short_message(error),
        "http_status": getattr(error, "http_status", None),
    }


def _short_message(error: Exception) -> str:
    return (getattr(error, "message", None) or str(error) or type(error).__name__)[:500]


def _classify(error: Exception, action: ActionDefinition | None) -> OutcomeError:
    if isinstance(error, OutcomeError):
        return error
    message = f"unexpected {type(error).__name__}"
    if action is not None and action.external:
        # We cannot tell whether an unexpected failure happened before or after the request
        # left: treat it as ambiguous (reconcile before retrying), never as a clean failure.
        return AmbiguousError(message)
    # Inside our own transaction the effect was rolled back, so trying again is safe.
    return TransientError(message)


def record_failure(operation, action, error: Exception, *, started_at, worker, attempt=None) -> None:
    outcome_error = _classify(error, action)
    if not isinstance(error, OutcomeError):
        logger.exception("unexpected error performing %s", operation.key, exc_info=error)
    category = outcome_error.category
    token = operation.fencing_token

    def record():
        to_state, fields, detail = _next_state_after(operation, action, outcome_error)
        reason = f"{category}: {detail}"
        with transaction.atomic():
            # Lock order (docs/architecture.md): the Attempt, then the row, the tallies and the chain
            # (transition_operation).
            if attempt is None:
                row = new_attempt(operation, worker=worker, started_at=started_at, outcome=category, error=error)
            else:
                finish_attempt(attempt, category, error)
                row = attempt
            if not transition_operation(
                operation, to_state=to_state, actor=worker, kind=_failure_kind(to_state),
                fencing_token=token, attempt=row, error_category=category, message=reason,
                last_error_category=category, last_error_message=detail[:500],
                lease_owner="", lease_expires_at=None, **fields,
            ):
                raise StaleClaim
            # Wake a worker when the retry is due, or the reconciler when the lookup is, rather
            # than when the sweep or the reconcile schedule next looks.
            if to_state == State.RETRYING:
                transaction.on_commit(partial(nudges.enqueue_processing, operation.pk, at=fields["next_attempt_at"]))
            elif to_state == State.UNKNOWN:
                transaction.on_commit(partial(nudges.enqueue_lookup, operation.pk, at=fields["next_attempt_at"]))

    try:
        commit_outcome(operation, record)
    except StaleClaim:
        # An external try's attempt row was begun under this claim: that one is marked stale (a
        # second row for the same claim would break attempt_one_per_claim).
        refuse_stale(operation, worker=worker, token=token, started_at=started_at, attempt=attempt)


def _failure_kind(to_state: State) -> str:
    return {State.RETRYING: "retry_scheduled", State.UNKNOWN: "outcome_unknown",
            State.NEEDS_REVIEW: "needs_review"}[to_state]


def _next_state_after(operation, action, error: OutcomeError) -> tuple[State, dict, str]:
    """Where a failed try leads: (state, extra fields, what happened for people). The text leaves
    out the error's category: it is stored beside it (``last_error_category``) and every place that
    shows one shows both, which read "permanent permanent: ..." when the text began with it too."""
    message = _short_message(error)
    if action is None or isinstance(error, PermanentError):
        return State.NEEDS_REVIEW, {"next_attempt_at": None}, message
    retry_allowed = operation.attempts < action.max_attempts
    if isinstance(error, AmbiguousError):
        if action.honours_idempotency_keys and retry_allowed:
            # The destination deduplicates by our key, so the same key can safely be sent again.
            return _retry_or_review(operation, action, error, f"retry with same key: {message}")
        # Unknown: reconciliation asks the destination once the request can no longer land.
        return State.UNKNOWN, {"next_attempt_at": timezone.now() + action.settle_after}, message
    if not retry_allowed:
        limit = f"{operation.attempts} of {action.max_attempts}"
        return State.NEEDS_REVIEW, {"next_attempt_at": None}, f"attempt limit reached ({limit}): {message}"
    return _retry_or_review(operation, action, error, message)


def _retry_or_review(operation, action, error: OutcomeError, reason: str) -> tuple[State, dict, str]:
    now = timezone.now()
    delay = retry_delay(operation.attempts, base=action.backoff_base_seconds, cap=action.backoff_cap_seconds,
                        retry_after=getattr(error, "retry_after", None))
    next_attempt_at = now + timedelta(seconds=delay)
    budget_frees_at = _retry_budget_frees_at(operation.workspace, now)
    if budget_frees_at and budget_frees_at > next_attempt_at:
        next_attempt_at = budget_frees_at
        reason += f" (workspace retry budget spent; waits until {budget_frees_at:%H:%M:%S})"
    if operation.deadline and next_attempt_at > operation.deadline:
        return State.NEEDS_REVIEW, {"next_attempt_at": None}, f"processing deadline passed: {reason}"
    return State.RETRYING, {"next_attempt_at": next_attempt_at}, reason


def _retry_budget_frees_at(workspace, now) -> datetime | None:
    """When the workspace may schedule its next retry, if its hourly budget is spent now."""
    window_start = now - RETRY_BUDGET_WINDOW
    recent = AuditEvent.objects.filter(
        workspace=workspace, kind="retry_scheduled", created_at__gt=window_start
    ).order_by("-created_at").values_list("created_at", flat=True)
    budget = workspace.retry_budget_per_hour
    if budget == 0:
        return now + RETRY_BUDGET_WINDOW  # no budget at all: every retry waits a full window
    spent = list(recent[:budget])
    if len(spent) < budget:
        return None
    # The budget frees when the oldest of the last `budget` retries leaves the window.
    return spent[-1] + RETRY_BUDGET_WINDOW


def refuse_stale(operation, *, worker, token, started_at, attempt=None, begun=True) -> None:
    """Audit a completion that arrived after the claim was lost; apply nothing."""
    with transaction.atomic():
        if attempt is not None:
            finish_attempt(attempt, Attempt.Outcome.STALE)
        elif begun:
            new_attempt(operation, worker=worker, started_at=started_at, outcome=Attempt.Outcome.STALE)
        record_audit_event(
            actor=worker, kind="stale_completion_refused", operation=operation,
            message=f"claim {token} no longer holds the operation; outcome not applied",
        )
    logger.warning("stale completion refused for %s (claim %s)", operation.key, token)
