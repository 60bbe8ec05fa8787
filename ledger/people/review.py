"""What a person does with an operation, the ground its services share: the refusal they raise
(``ReviewError``), the review role they require, a reason that quotes no sensitive value, and an
operation found at the destination when a replay or a cancel asked first. The services:
``ledger.people.replays`` (run it again under its own key), ``ledger.people.resolutions`` (record
the destination's record found by hand), ``ledger.people.cancellations`` (give up on it) and
``ledger.people.conflict_decisions`` (dismiss a conflict, or apply its payload while the operation
has not run).

Console views, commands and the API call these with the person acting (an operator or admin of
the operation's workspace, ``ledger.core.roles``), or the API with a machine's token holding the
operate scope (``roles.Machine``, an operator there); like every write they go through
``transition_operation``, so each is a guarded state change with its audit event. Whoever replays
an operation or applies a conflict to it is recorded as one of its contributors, who may not
approve it (``ledger.people.approvals``); a machine is nobody's contributor.
"""

from ledger.actions import ActionDefinition, registry
from ledger.core import sensitive_notes
from ledger.core.transitions import transition_operation
from ledger.models import Operation
from ledger.outcomes import Found
from ledger.people import may
from ledger.states import State


class ReviewError(Exception):
    """The action is not possible for this operation now; the message says why."""


class SensitiveReason(sensitive_notes.SensitiveNote, ReviewError):
    """The reason quotes a sensitive value of what it concerns (``sensitive_notes.refuse_sensitive_note``)."""


def refuse_sensitive_reason(reason: str, *concerns, label: str = "reason") -> None:
    """Refuse (``SensitiveReason``, before anything is written) a reason (or what ``label`` names)
    quoting a sensitive value."""
    sensitive_notes.refuse_sensitive_note(reason, concerns, label=label, error=SensitiveReason)


def succeed_found(operation, answer: Found, *, actor, reason, asked_by: str) -> None:
    """A replay or a cancel asked the destination first, and it has the record: succeeded."""
    done = "nothing was sent" if asked_by == "replay" else "nothing was cancelled"
    found = transition_operation(
        operation,
        to_state=State.SUCCEEDED,
        actor=actor,
        kind="reconciled_on_replay" if asked_by == "replay" else "reconciled_on_cancel",
        message=f"{asked_by} asked the destination first: it has record {answer.external_id}; {done}"
        + (f" ({reason})" if reason else ""),
        external_id=answer.external_id,
        result=answer.result,
        next_attempt_at=None,
        last_error_category="",
        last_error_message="",
    )
    if not found:
        raise ReviewError(f"{operation.key} changed meanwhile; reload it and decide again.")


def require(refusal: str) -> None:
    """Refuse (``ReviewError``) with a rule's words (``ledger.people.may``) when it refuses."""
    if refusal:
        raise ReviewError(refusal)


def require_review(user, operation: Operation) -> None:
    """The person needs a role that may review in the operation's workspace (operator or admin)."""
    require(may.review_refusal(user, operation))


def action_of(operation: Operation) -> ActionDefinition:
    """The operation's action, refused (``ReviewError``) when it is no longer defined."""
    action = registry.get(operation.action)
    if action is None:
        raise ReviewError(may.unregistered(operation))
    return action
