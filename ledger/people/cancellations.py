"""Cancelling an operation that has not run to an end, after asking the destination first where a
try may have reached it (found there, it is succeeded instead).
"""

from dataclasses import dataclass

from ledger.actions import registry
from ledger.core.transitions import transition_operation
from ledger.engine.lookups import ask_destination, may_have_acted
from ledger.models import Operation
from ledger.outcomes import CannotTell, Found
from ledger.people import may
from ledger.people.review import ReviewError, refuse_sensitive_reason, require, require_review, succeed_found
from ledger.states import State


@dataclass(frozen=True)
class Cancel:
    """What a cancel did. ``verdict``: ``cancelled``, or ``found`` (a try may have reached the
    destination, which was asked first and has the record: the operation is succeeded, nothing
    was cancelled)."""

    operation: Operation
    verdict: str
    lookup: str = ""  # what the destination said, when it was asked


def cancel_operation(operation: Operation, *, user, reason: str) -> Cancel:
    """Give up on an operation that has not run to an end (pending, retrying or needing review).

    Where a try may have reached the destination, it is asked first, as a replay asks (outside any
    transaction): found -> ``succeeded`` with its record id and nothing is cancelled, since the
    effect happened; absent or cannot tell -> cancelled, with what it said in the audit message."""
    require_review(user, operation)
    require(may.cancel_refusal(operation))
    refuse_sensitive_reason(reason, operation)
    actor = user.get_username()
    action = registry.get(operation.action)  # an action no longer defined: cancelled unasked
    lookup = ""
    if action is not None and may_have_acted(operation, action):
        answer = ask_destination(operation, action)
        if isinstance(answer, Found):
            succeed_found(operation, answer, actor=actor, reason=reason, asked_by="cancel")
            return Cancel(operation, "found", lookup=f"the destination has record {answer.external_id}")
        lookup = (
            f"the destination cannot tell whether it acted: {answer.reason}"
            if isinstance(answer, CannotTell)
            else "the destination has no record"
        )
    message = f"cancel: {reason}" if reason else "cancel"
    cancelled = transition_operation(
        operation,
        to_state=State.CANCELLED,
        actor=actor,
        kind="cancelled",
        message=message + (f"; {lookup}" if lookup else ""),
        next_attempt_at=None,
    )
    if not cancelled:
        raise ReviewError(f"{operation.key} changed meanwhile; reload it and decide again.")
    return Cancel(operation, "cancelled", lookup=lookup)
