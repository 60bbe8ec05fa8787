"""Taking an operation: a person marks it as theirs, or hands it on, so that two people do not work the same one.
An operator hands a refund's conflict to an approver, who sees its amounts.

A marker, not a lock: whoever may act on the operation still can. Taking one nobody holds, taking
over one someone else holds (only when asked explicitly), handing one on and giving one back are each a guarded
UPDATE of the assignment alone (it names the holder it expects, so two people taking at once
cannot both win) with its audit event, in one transaction. Nothing is written when nothing
changes (taking one you hold, giving back one you do not): autovacuum is off for the operations
(docs/architecture.md), and every UPDATE leaves a dead row. ``updated_at`` is left alone: taking
is not a change of the operation, and the queue's "Updated" order stays the work's own.
"""

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from ledger.core import roles
from ledger.core.transitions import record_audit_event
from ledger.models import Conflict, ConflictStatus, Operation
from ledger.states import TERMINAL_STATES

# Who may take an operation: who may act on it in its workspace.
TAKERS = (roles.REVIEW, roles.APPROVE)


class AssignmentError(Exception):
    """The operation cannot be taken or given back as asked; the message says why (nothing was written)."""


class HeldBySomeoneElse(AssignmentError):
    """Someone else holds it: taking it over must be asked for explicitly."""


class NothingToTake(AssignmentError):
    """It is finished, with no conflict left to decide."""


def may_take(user, operation: Operation, *, open_conflict: bool | None = None) -> bool:
    """Someone who may act on it (``may_act``), while it has work left (``has_work``;
    ``open_conflict``: whether it has a conflict to decide, when the caller knows)."""
    return may_act(user, operation) and has_work(operation, open_conflict=open_conflict)


def may_act(user, operation: Operation) -> bool:
    """Someone (a person: a machine's token takes nothing) who may act on it in its workspace."""
    person = roles.person_of(user)
    return person is not None and any(roles.can(person, capability, operation.workspace_id) for capability in TAKERS)


def has_work(operation: Operation, *, open_conflict: bool | None = None) -> bool:
    """Whether there is anything left to work on (``nothing_to_take``); ``open_conflict`` spares the
    read of its conflicts when the caller has them."""
    if open_conflict is not None and operation.state in TERMINAL_STATES:
        return open_conflict
    return operation.pk not in nothing_to_take([operation])


def take_operation(operation: Operation, *, user, take_over: bool = False) -> bool:
    """Assign ``operation`` to ``user``; returns whether anything changed (False: they hold it
    already). Someone else's: refused unless ``take_over`` (audited as ``taken_over``, naming
    them). ``AssignmentError`` when ``user`` may not act on it."""
    _require_may_take(user, operation)
    with transaction.atomic():
        holder = _holder(operation)
        if holder == user.pk:
            return False
        if holder is not None and not take_over:
            raise HeldBySomeoneElse(f"{_name(holder)} has taken this operation; take it over to work on it yourself.")
        taken_over = holder is not None
        _hand_over(
            operation,
            holder=holder,
            to=user,
            actor=user,
            kind="taken_over" if taken_over else "taken",
            message=f"taken over from {_name(holder)}" if taken_over else "taken",
        )
    return True


def assign_operation(operation: Operation, *, user, to) -> bool:
    """Hand ``operation`` to ``to`` (a person who may act on it: an approver, who sees the amounts an
    operator may not); returns whether anything changed (False: ``to`` holds it already). ``user``
    may act on it too, and may hand over only what nobody holds or what they hold themselves: someone
    else's work is taken over first. Audited as ``assigned``, naming who it was handed to.
    ``AssignmentError`` otherwise, nothing written."""
    _require_may_take(user, operation)
    _require_may_take(to, operation)
    with transaction.atomic():
        holder = _holder(operation)
        if holder == to.pk:
            return False
        if holder not in (None, user.pk):
            raise HeldBySomeoneElse(f"{_name(holder)} has taken this operation; take it over before handing it on.")
        _hand_over(
            operation, holder=holder, to=to, actor=user, kind="assigned", message=f"assigned to {to.get_username()}"
        )
    return True


def release_operation(operation: Operation, *, user) -> bool:
    """Give ``operation`` back, if ``user`` holds it; returns whether anything changed."""
    with transaction.atomic():
        released = Operation.objects.filter(pk=operation.pk, assigned_to=user).update(
            assigned_to=None, assigned_at=None
        )
        if released:
            record_audit_event(actor=user.get_username(), kind="released", operation=operation, message="given back")
    if released:
        operation.assigned_to, operation.assigned_at = None, None
    return bool(released)


def nothing_to_take(operations) -> set[int]:
    """The ids of ``operations`` with no work left: the finished ones (succeeded, rejected,
    cancelled) without a conflict waiting for a decision, read in one query for a list's page
    (none for unfinished ones)."""
    finished = {operation.pk for operation in operations if operation.state in TERMINAL_STATES}
    if not finished:
        return set()
    deciding = Conflict.objects.filter(operation__in=finished, status=ConflictStatus.OPEN).values_list(
        "operation_id", flat=True
    )
    return finished - set(deciding)


def _require_may_take(user, operation: Operation) -> None:
    if not may_act(user, operation):
        raise AssignmentError(f"{user.get_username()} may not act on operations of workspace {operation.workspace}.")
    if not has_work(operation):
        raise NothingToTake(
            f"This operation has finished ({operation.get_state_display().lower()}): nothing is left to take."
        )


def _holder(operation: Operation) -> int | None:
    """Who holds ``operation`` now, as the row says (not the instance, which may be stale)."""
    return Operation.objects.filter(pk=operation.pk).values_list("assigned_to", flat=True).first()


def _hand_over(operation: Operation, *, holder: int | None, to, actor, kind: str, message: str) -> None:
    """The guarded UPDATE: ``operation`` to ``to`` only while ``holder`` still holds it (two people at
    once cannot both win), with its audit event; inside the caller's transaction. The instance
    follows once the row is written."""
    now = timezone.now()
    moved = Operation.objects.filter(pk=operation.pk, assigned_to=holder).update(assigned_to=to, assigned_at=now)
    if not moved:
        raise AssignmentError("Someone took this operation at the same moment; look again.")
    record_audit_event(actor=actor.get_username(), kind=kind, operation=operation, message=message)
    operation.assigned_to, operation.assigned_at = to, now


def _name(user_id) -> str:
    user = get_user_model().objects.filter(pk=user_id).first()
    return user.get_username() if user else "someone"
