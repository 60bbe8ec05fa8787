"""Resolving an operation by hand: a person who checked the destination records the record they
found there, and the operation is succeeded.
"""

from ledger.actions import registry
from ledger.core.transitions import transition_operation
from ledger.models import Operation
from ledger.people import may
from ledger.people.review import ReviewError, refuse_sensitive_reason, require, require_review
from ledger.states import State

EXTERNAL_ID_MAX = 200


def resolve_operation(
    operation: Operation, *, user, external_id: str, reason: str, seen_at_destination: bool = False
) -> Operation:
    """A person who checked the destination by hand records what they found there: an ``unknown``
    or ``needs_review`` operation becomes ``succeeded`` with the destination's record id, audited
    with the person and how they checked. Only where a try may have reached the destination
    (``may.mark_succeeded_refusal``): after definite refusals alone, no record of ours can be there, unless
    the reconciliation audit saw one carrying our key (``seen_at_destination``)."""
    require_review(user, operation)
    external_id = external_id.strip()
    if not external_id:
        raise ReviewError("Give the destination's record id you found.")
    if len(external_id) > EXTERNAL_ID_MAX or not external_id.isprintable():
        raise ReviewError(f"The record id must be printable text of at most {EXTERNAL_ID_MAX} characters.")
    if not reason.strip():
        raise ReviewError("Say how you checked the destination: the reason is kept in the audit trail.")
    refuse_sensitive_reason(reason, operation)
    # The record id is shown as written too, in the audit trail and on the operation's page.
    refuse_sensitive_reason(external_id, operation, label="record id")
    action = registry.get(operation.action)
    require(may.mark_succeeded_refusal(operation, action, seen_at_destination=seen_at_destination))
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
