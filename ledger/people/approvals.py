"""Approvals: a person signs off on a consequential operation, for its exact payload, before it runs.

Who may decide is a role in the operation's workspace (approver or admin, ``ledger.core.roles``).
Four eyes: nobody who submitted, changed (applied a conflict to) or replayed an operation may
decide on it, approve or reject; those people are its ``Contribution`` rows, written by every entry
point that acts for a person. Rejecting is refused to them too because it is as final as approving
is consequential: a rejected operation never runs, and its key answers every later delivery as a
duplicate of it, so one person alone could otherwise stop for good a business action they had a
hand in (a changed amount they then reject, a colleague's refund they replayed). Each decision is
an Approval row plus a guarded transition, in one transaction.
"""

from functools import partial

from django.db import transaction
from django.utils import timezone

from ledger.actions import registry
from ledger.core import nudges, sensitive_notes
from ledger.core.transitions import transition_operation
from ledger.models import Approval, Operation
from ledger.people import may
from ledger.states import State


class ApprovalError(Exception):
    """The decision is not possible; the message says why."""


class SensitiveApprovalNote(sensitive_notes.SensitiveNote, ApprovalError):
    """The note quotes a sensitive value of the operation (``sensitive_notes.refuse_sensitive_note``)."""


def approve_operation(operation: Operation, *, user, note: str = "", fingerprint: str | None = None) -> Approval:
    """``pending_approval`` -> ``pending``; the workers are nudged on commit.

    ``fingerprint`` is the payload the approver looked at: if it changed since, nothing is approved.
    The processing deadline starts now. Refused to anyone who submitted, changed or replayed it.
    """
    return _decide(
        operation,
        user=user,
        decision=Approval.Decision.APPROVED,
        to_state=State.PENDING,
        note=note,
        fingerprint=fingerprint,
    )


def reject_operation(operation: Operation, *, user, note: str, fingerprint: str | None = None) -> Approval:
    """``pending_approval`` -> ``rejected`` (final): the operation never runs. Refused to anyone who
    submitted, changed or replayed it, as approving is."""
    if not note.strip():
        raise ApprovalError("Say why the operation is rejected.")
    return _decide(
        operation,
        user=user,
        decision=Approval.Decision.REJECTED,
        to_state=State.REJECTED,
        note=note,
        fingerprint=fingerprint,
    )


def _require(refusal: str) -> None:
    """Refuse (``ApprovalError``) with a rule's words (``ledger.people.may``) when it refuses."""
    if refusal:
        raise ApprovalError(refusal)


def _decide(operation, *, user, decision, to_state, note, fingerprint) -> Approval:
    _require(may.approve_refusal(user, operation))
    _require(may.decide_refusal(operation))
    if fingerprint is not None and fingerprint != operation.fingerprint:
        raise ApprovalError(f"The payload of {operation.key} changed since it was shown; look at it again.")
    _require(may.own_work_refusal(user, operation, "approve" if decision == Approval.Decision.APPROVED else "reject"))
    # The note is shown on the operation page and in the audit trail, to viewers too.
    sensitive_notes.refuse_sensitive_note(note, [operation], label="note", error=SensitiveApprovalNote)
    deadline = {}
    if decision == Approval.Decision.APPROVED:
        # The processing deadline starts at approval: time spent waiting for a person is not the worker's.
        deadline = {"deadline": timezone.now() + _action_of(operation).deadline}
    with transaction.atomic():
        # Lock order (docs/architecture.md): the row, then the chain (transition_operation); the Approval
        # is a new row.
        # The payload decided on is part of the guard: a conflict applied meanwhile refuses this.
        if not transition_operation(
            operation,
            to_state=to_state,
            actor=user.get_username(),
            kind=f"approval_{decision}",
            also_requires={"fingerprint": operation.fingerprint},
            message=audit_message(note, operation.fingerprint),
            **deadline,
        ):
            raise ApprovalError(f"{operation.key} changed meanwhile; reload it and decide again.")
        approval = Approval.objects.create(
            operation=operation,
            fingerprint=operation.fingerprint,
            decision=decision,
            approver=user.get_username(),
            note=note[:500],
        )
        if decision == Approval.Decision.APPROVED:
            transaction.on_commit(partial(nudges.enqueue_processing, operation.pk))
    return approval


def audit_message(note: str, fingerprint: str) -> str:
    """The decision's audit message: the note, then the payload decided on, so the trail itself
    binds each decision to its fingerprint (the Approval row keeps the whole note)."""
    bound = f"(payload {fingerprint})"
    return f"{note.strip()[: 499 - len(bound)]} {bound}".lstrip()


def _action_of(operation: Operation):
    action = registry.get(operation.action)
    if action is None:
        raise ApprovalError(may.unregistered(operation))
    return action
