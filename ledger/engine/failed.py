"""Recording that a claimed try failed: the error classified into the next state (retrying with
backoff and jitter within the workspace's retry budget, unknown to be looked up, or needs_review),
under the claim's fencing token. Successes are ``ledger.engine.succeeded``'s."""

import logging
from datetime import datetime, timedelta
from functools import partial

from django.db import transaction
from django.utils import timezone

from ledger import timed
from ledger.actions import ActionDefinition
from ledger.core import nudges, privacy
from ledger.core.retry import retry_delay
from ledger.core.transitions import transition_many
from ledger.engine.attempts import finish_attempt, new_attempt, short_message
from ledger.engine.fencing import StaleClaim, commit_outcome, refuse_stale
from ledger.models import AuditEvent
from ledger.outcomes import AmbiguousError, OutcomeError, PermanentError, TransientError
from ledger.states import State

logger = logging.getLogger("ledger")


RETRY_BUDGET_WINDOW = timedelta(hours=1)


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
    if isinstance(error, OutcomeError):
        # What the destination said is stored below, on the attempt and the operation: masked first.
        privacy.scrub_failure(error, operation, action)
    else:
        logger.exception("unexpected error performing %s", operation.key, exc_info=error)
    category = outcome_error.category
    token = operation.fencing_token

    def record():
        with transaction.atomic():
            # Lock order (docs/architecture.md): the Attempt, then the row, the tallies (the try's
            # outcome counted with the move) and the chain (write_failure).
            if attempt is None:
                row = new_attempt(
                    operation, worker=worker, started_at=started_at, outcome=category, error=error, counted=False
                )
            else:
                finish_attempt(attempt, category, error, counted=False)
                row = attempt
            write_failure(operation, action, outcome_error, attempt=row, worker=worker, token=token)

    try:
        commit_outcome(operation, record)
    except StaleClaim:
        # An external try's attempt row was begun under this claim: that one is marked stale (a
        # second row for the same claim would break attempt_one_per_claim).
        refuse_stale(operation, worker=worker, token=token, started_at=started_at, attempt=attempt)


def write_failure(operation, action, error: OutcomeError, *, attempt, worker: str, token: int) -> None:
    """Move a claimed operation whose try failed with ``error`` (classified) to the state that
    failure leads to, in the caller's transaction, under the claim's ``token`` (StaleClaim when
    it was lost); ``attempt``, finished uncounted by the caller, is counted with the move."""
    category = error.category
    to_state, fields, detail = _next_state_after(operation, action, error)
    # The times the words name (ledger.timed): none but a spent retry budget's.
    times = fields.setdefault("last_error_times", None)
    transition_many(
        [operation],
        to_state=to_state,
        actor=worker,
        kind=_failure_kind(to_state),
        tokens=[token],
        attempt_rows=[attempt],
        attempt_outcome=category,
        raise_if_any_stays=StaleClaim,
        error_category=category,
        message=f"{category}: {detail}",
        times=times,
        same={
            "last_error_category": category,
            "last_error_message": detail[:500],
            "lease_owner": "",
            "lease_expires_at": None,
            **fields,
        },
    )
    # Wake a worker when the retry is due, or the reconciler when the lookup is, rather than when
    # the sweep or the reconcile schedule next looks. A caller-performed retry waits for its caller.
    if to_state == State.RETRYING and not (action and action.performed_by_caller):
        transaction.on_commit(partial(nudges.enqueue_processing, operation.pk, at=fields["next_attempt_at"]))
    elif to_state == State.UNKNOWN:
        transaction.on_commit(partial(nudges.enqueue_lookup, operation.pk, at=fields["next_attempt_at"]))


def _failure_kind(to_state: State) -> str:
    return {State.RETRYING: "retry_scheduled", State.UNKNOWN: "outcome_unknown", State.NEEDS_REVIEW: "needs_review"}[
        to_state
    ]


def _next_state_after(operation, action, error: OutcomeError) -> tuple[State, dict, str]:
    """Where a failed try leads: (state, extra fields, what happened for people: its times, if it
    names any, in the fields' ``last_error_times``). The text leaves
    out the error's category: it is stored beside it (``last_error_category``) and every place that
    shows one shows both, which read "permanent permanent: ..." when the text began with it too."""
    message = short_message(error)
    if action is None or isinstance(error, PermanentError):
        return State.NEEDS_REVIEW, {"next_attempt_at": None}, message
    retry_allowed = operation.attempts < action.max_attempts
    if isinstance(error, AmbiguousError):
        # A caller that says it cannot tell whether it acted is never told to act again on its own
        # word: a lookup or a person decides (docs/claims.md).
        if retry_allowed and not action.performed_by_caller and action.key_still_kept(operation, timezone.now()):
            # The destination deduplicates by our key (and still keeps it), so the same key can
            # safely be sent again.
            return _retry_or_review(operation, action, error, f"retry with same key: {message}")
        # Unknown: reconciliation asks the destination once the request can no longer land.
        return State.UNKNOWN, {"next_attempt_at": timezone.now() + action.settle_after}, message
    if not retry_allowed:
        limit = f"{operation.attempts} of {action.max_attempts}"
        return State.NEEDS_REVIEW, {"next_attempt_at": None}, f"attempt limit reached ({limit}): {message}"
    return _retry_or_review(operation, action, error, message)


def _retry_or_review(operation, action, error: OutcomeError, reason: str) -> tuple[State, dict, str]:
    now = timezone.now()
    delay = retry_delay(
        operation.attempts,
        base=action.backoff_base_seconds,
        cap=action.backoff_cap_seconds,
        retry_after=getattr(error, "retry_after", None),
    )
    next_attempt_at = now + timedelta(seconds=delay)
    budget_frees_at = _retry_budget_frees_at(operation.workspace, now)
    if budget_frees_at and budget_frees_at > next_attempt_at:
        next_attempt_at = budget_frees_at
        reason += " (workspace retry budget spent; waits until {retry_budget_frees_at})"
        times = timed.kept(retry_budget_frees_at=budget_frees_at)
    else:
        times = None
    if operation.deadline and next_attempt_at > operation.deadline:
        return (
            State.NEEDS_REVIEW,
            {"next_attempt_at": None, "last_error_times": times},
            f"processing deadline passed: {reason}",
        )
    return State.RETRYING, {"next_attempt_at": next_attempt_at, "last_error_times": times}, reason


def _retry_budget_frees_at(workspace, now) -> datetime | None:
    """When the workspace may schedule its next retry, if its hourly budget is spent now."""
    window_start = now - RETRY_BUDGET_WINDOW
    recent = (
        AuditEvent.objects.filter(workspace=workspace, kind="retry_scheduled", created_at__gt=window_start)
        .order_by("-created_at")
        .values_list("created_at", flat=True)
    )
    budget = workspace.retry_budget_per_hour
    if budget == 0:
        return now + RETRY_BUDGET_WINDOW  # no budget at all: every retry waits a full window
    spent = list(recent[:budget])
    if len(spent) < budget:
        return None
    # The budget frees when the oldest of the last `budget` retries leaves the window.
    return spent[-1] + RETRY_BUDGET_WINDOW
