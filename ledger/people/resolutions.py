"""Resolving an operation by hand: a person who checked the destination records the record they
found there, and the operation is succeeded.
"""

from ledger.core.transitions import transition_operation
from ledger.engine.lookups import may_have_acted
from ledger.models import Operation
from ledger.people import holds
from ledger.people.review import ReviewError, _action_of, _require_review, refuse_sensitive_reason
from ledger.states import State

EXTERNAL_ID_MAX = 200


def resolve_operation(
    operation: Operation, *, user, external_id: str, reason: str, seen_at_destination: bool = False
) -> Operation:
    """A person who checked the destination by hand records what they found there: an ``unknown``
    or ``needs_review`` operation becomes ``succeeded`` with the destination's record id, audited
    with the person and how they checked. Only where a try may have reached the destination
    (``may_mark_succeeded``): after definite refusals alone, no record of ours can be there, unless
    the reconciliation audit saw one carrying our key (``seen_at_destination``)."""
    _require_review(user, operation)
    external_id = external_id.strip()
    if not external_id:
        raise ReviewError("Give the destination's record id you found.")
    if len(external_id) > EXTERNAL_ID_MAX or not external_id.isprintable():
        raise ReviewError(f"The record id must be printable text of at most {EXTERNAL_ID_MAX} characters.")
    if not reason.strip():
        raise ReviewError("Say how you checked the destination: the reason is kept in the audit trail.")
    refuse_sensitive_reason(reason, operation)
    if operation.state not in (State.UNKNOWN, State.NEEDS_REVIEW):
        raise ReviewError(
            f"Only an unknown operation or one that needs review can be resolved; {operation.key} is {operation.state}."
        )
    if holds.is_held(operation):
        raise ReviewError(
            f"{operation.key} is held by a conflicting delivery and never ran: the destination has no record of it. "
            "Apply or dismiss the conflict to let it run, or cancel it."
        )
    action = _action_of(operation)
    if not action.external:
        raise ReviewError(
            f"{operation.action} has no external destination to find a record at; "
            "replay or cancel the operation instead."
        )
    if not seen_at_destination and not may_mark_succeeded(operation, action):
        raise ReviewError(
            f"Every try of {operation.key} was refused before it acted, so the destination holds no record of it; "
            "replay or cancel the operation instead."
        )
    actor = user.get_username()
    resolved = transition_operation(
        operation,
        to_state=State.SUCCEEDED,
        actor=actor,
        kind="resolved",
        message=f"resolved by hand: the destination has record {external_id}: {reason}",
        external_id=external_id,
        result={"external_id": external_id, "resolved_by": actor},
        next_attempt_at=None,
        last_error_category="",
        last_error_message="",
    )
    if not resolved:
        raise ReviewError(f"{operation.key} changed meanwhile; reload it and decide again.")
    return operation


def may_mark_succeeded(operation: Operation, action) -> bool:
    """Whether a person may record that the destination has the operation's record: it is unknown,
    or a try of it may have reached the destination (not only definite refusals)."""
    return bool(action and action.external) and (operation.state == State.UNKNOWN or may_have_acted(operation, action))
