"""The Attempt rows of tries: numbered per operation, opened before a request leaves, finished with
the outcome's category and a short message (never the payload)."""

from django.utils import timezone

from ledger.core import configuration, tallies
from ledger.models import Attempt, Operation


def attempt_number(operation: Operation) -> int:
    """The number of the try a claim begins: its fencing token, which every claim of the operation
    takes the next of, across replays. ``attempts`` restarts at 0 when a person replays (it counts
    the tries toward the action's limit), so numbered by it the first try after a replay was 1 again."""
    return operation.fencing_token


def open_attempt(operation, action, *, worker, started_at, config_version: str | None = None) -> Attempt:
    """An unsaved Attempt for a try about to begin under the operation's claim, under the
    configuration it begins with (``ledger.core.configuration``). It carries the idempotency key
    when the destination honours it, and always for a caller's try (``ledger.callers``): the caller
    is told to send it."""
    sends_key = action.honours_idempotency_keys or action.performed_by_caller
    return Attempt(
        operation=operation,
        number=attempt_number(operation),
        fencing_token=operation.fencing_token,
        worker=worker,
        started_at=started_at,
        idempotency_key=operation.key if sends_key else "",
        config_version_id=config_version or configuration.digest_for(operation),
    )


def new_attempt(
    operation,
    *,
    worker,
    started_at,
    outcome,
    error: Exception | None = None,
    external_id: str = "",
    counted: bool = True,
) -> Attempt:
    """A finished try's row; counted now unless the move that records it counts it (``counted``
    False: ``transition_many``'s ``attempt_outcome``, after the rows, in the lock order)."""
    if counted:
        tallies.count_attempts([(operation, outcome)])
    return Attempt.objects.create(
        operation=operation,
        number=attempt_number(operation),
        fencing_token=operation.fencing_token,
        worker=worker,
        started_at=started_at,
        finished_at=timezone.now(),
        outcome=outcome,
        external_id=external_id,
        config_version_id=configuration.digest_for(operation),
        **_error_fields(error),
    )


def finish_attempt(attempt: Attempt, outcome: str, error: Exception | None = None, *, counted: bool = True) -> None:
    """A begun try's outcome; counted as ``new_attempt`` counts it."""
    if counted:
        tallies.count_attempts([(attempt.operation, outcome)])
    attempt.finished_at = timezone.now()
    attempt.outcome = outcome
    for name, value in _error_fields(error).items():
        setattr(attempt, name, value)
    attempt.save(
        update_fields=[
            "finished_at",
            "outcome",
            "error_type",
            "error_message",
            "http_status",
            *ANSWER_FIELDS,
            "external_id",
            "report",
        ]
    )


ANSWER_FIELDS = ("error_code", "response_headers", "response_body")


def _error_fields(error: Exception | None) -> dict:
    if error is None:
        return {}
    answer = getattr(error, "answer", None)
    return {
        "error_type": type(error).__qualname__[:200],
        "error_message": short_message(error),
        "http_status": getattr(error, "http_status", None),
        # What the destination said (``ledger.outcomes.Answer``), masked by the caller.
        "error_code": answer.code if answer else "",
        "response_headers": answer.headers if answer else {},
        "response_body": answer.body if answer else "",
    }


def short_message(error: Exception) -> str:
    """What an attempt keeps of ``error``: its message (or its type's name), at most 500 characters."""
    return (getattr(error, "message", None) or str(error) or type(error).__name__)[:500]
