"""Approvals: a person signs off on a consequential operation, for its exact payload, before it runs.

Who may decide is a permission (``ledger.approve_operation``); the submitter of an operation may
never approve it. Each decision is an Approval row plus a guarded transition, in one transaction.
"""

from functools import partial

from django.db import transaction

from ledger import tasks
from ledger.models import Approval, Operation
from ledger.services import transition_operation
from ledger.states import State

PERMISSION = "ledger.approve_operation"


class ApprovalError(Exception):
    """The decision is not possible; the message says why."""


def approve_operation(operation: Operation, *, user, note: str = "", fingerprint: str | None = None) -> Approval:
    """``pending_approval`` -> ``pending``; the workers are nudged on commit.

    ``fingerprint`` is the payload the approver looked at: if it changed since, nothing is approved.
    """
    if operation.submitted_by == user.get_username():
        raise ApprovalError("The submitter of an operation cannot approve it.")
    return _decide(operation, user=user, decision=Approval.Decision.APPROVED, to_state=State.PENDING,
                   note=note, fingerprint=fingerprint)


def reject_operation(operation: Operation, *, user, note: str, fingerprint: str | None = None) -> Approval:
    """``pending_approval`` -> ``rejected`` (final): the operation never runs."""
    if not note.strip():
        raise ApprovalError("Say why the operation is rejected.")
    return _decide(operation, user=user, decision=Approval.Decision.REJECTED, to_state=State.REJECTED,
                   note=note, fingerprint=fingerprint)


def _decide(operation, *, user, decision, to_state, note, fingerprint) -> Approval:
    if not user.has_perm(PERMISSION):
        raise ApprovalError(f"{user.get_username()} may not approve or reject operations.")
    if operation.state != State.PENDING_APPROVAL:
        raise ApprovalError(
            f"{operation.key} is {operation.state}; only an operation awaiting approval can be decided."
        )
    if fingerprint is not None and fingerprint != operation.fingerprint:
        raise ApprovalError(f"The payload of {operation.key} changed since it was shown; look at it again.")
    with transaction.atomic():
        # The payload decided on is part of the guard: a conflict applied meanwhile refuses this.
        if not transition_operation(
            operation, to_state=to_state, actor=user.get_username(), kind=f"approval_{decision}",
            also_requires={"fingerprint": operation.fingerprint}, message=note[:500],
        ):
            raise ApprovalError(f"{operation.key} changed meanwhile; reload it and decide again.")
        approval = Approval.objects.create(operation=operation, fingerprint=operation.fingerprint,
                                           decision=decision, approver=user.get_username(), note=note[:500])
        if decision == Approval.Decision.APPROVED:
            transaction.on_commit(partial(tasks.enqueue_processing, operation.pk))
    return approval
