"""Approving many operations at once, from an approver's work list: each selected operation with
the fingerprint of the payload the confirmation page showed for it.

Each is decided on its own by ``approvals.approve_operation``, in its own transaction (the guarded
transition, the Approval row bound to that fingerprint, the audit event), so the role, four eyes,
the state and the fingerprint are checked per operation as for a single approval, and one refused
leaves the others approved: the outcome says, per operation, approved or why not, and nothing else
is written. A selection that names nothing, or a person who may approve nowhere, is refused before
anything is read.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from ledger.core import roles
from ledger.models import Operation
from ledger.people import may
from ledger.people.approvals import ApprovalError, approve_operation

# The most operations one confirmation may approve (the work list shows 100 a page).
SELECTION_MAX = 500


@dataclass(frozen=True)
class Outcome:
    """One selected operation: approved, or the reason it was not (``operation`` None: not found)."""

    operation_id: int
    operation: Operation | None
    approved: bool
    message: str = ""


def approve_selected(selection: Mapping[int, str], *, user, note: str = "") -> list[Outcome]:
    """Approve each operation of ``selection`` (id -> the fingerprint shown) that is still awaiting
    approval with that payload and that ``user`` may approve, in id order; an ``Outcome`` for each."""
    if not selection:
        raise ApprovalError("Select at least one operation to approve; nothing was approved.")
    if len(selection) > SELECTION_MAX:
        raise ApprovalError(f"Select at most {SELECTION_MAX} operations at once; nothing was approved.")
    if roles.workspace_ids(user, roles.APPROVE) == set():
        raise ApprovalError(f"{user.get_username()} may not approve or reject in any workspace; nothing was approved.")
    found = roles.visible(Operation.objects.select_related("workspace"), user).in_bulk(list(selection))
    return [_approve_one(pk, found.get(pk), selection[pk], user=user, note=note) for pk in sorted(selection)]


def _approve_one(pk: int, operation: Operation | None, fingerprint: str, *, user, note: str) -> Outcome:
    if operation is None:
        return Outcome(pk, None, False, f"No operation {pk} in your workspaces.")
    if may.decide_refusal(operation) and (decided := operation.approvals.first()) is not None:
        # Someone decided it between the page and the confirmation: say who, not just its state.
        return Outcome(pk, operation, False, f"{operation.key} was already {decided.decision} by {decided.approver}.")
    try:
        approve_operation(operation, user=user, note=note, fingerprint=fingerprint)
    except ApprovalError as exc:
        return Outcome(pk, operation, False, str(exc))
    return Outcome(pk, operation, True)
