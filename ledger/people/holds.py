"""Operations held by a conflict (their action's ``on_conflict`` is ``hold``): intake moved them to
``needs_review`` with the error category ``conflict`` when a delivery reused their key with a changed
payload before they ran (``ledger.intake.reservation``). A worker never claims them there. A person's
decision on the conflict releases one: applied, it runs with the incoming payload; dismissed, with
the recorded one. It goes back to the state it was held in (the ``conflict_held`` audit event's
``from_state``): ``pending``, or ``pending_approval`` where the approver has yet to sign off.

Only an operation with no open conflict left is released: one still open holds it (two conflicting
redeliveries need two decisions, or one "apply this, dismiss the rest").
"""

from functools import partial

from django.db import transaction
from django.utils import timezone

from ledger.actions import registry
from ledger.core import nudges
from ledger.core.transitions import transition_many
from ledger.intake.reservation import CONFLICT_HOLD, HELD
from ledger.models import AuditEvent, Conflict, Operation
from ledger.states import HOLDABLE_STATES, State

RELEASED = "conflict_released"


def is_held(operation: Operation) -> bool:
    return operation.state == State.NEEDS_REVIEW and operation.last_error_category == CONFLICT_HOLD


def held_from(operation_ids: list[int]) -> dict[int, State]:
    """The state each held operation was held in, from its latest ``conflict_held`` event (one query)."""
    events = (
        AuditEvent.objects.filter(operation_id__in=operation_ids, kind=HELD)
        .order_by("operation_id", "-id")
        .distinct("operation_id")
        .values_list("operation_id", "from_state")
    )
    return {pk: State(state) for pk, state in events if state in HOLDABLE_STATES}


def release_decided(decisions: dict[int, str], *, actor: str) -> list[Operation]:
    """Release the held operations among ``decisions`` (operation id: the decision on its conflict,
    for the audit, "conflict 7 applied: ...") whose conflicts are all decided, in the caller's
    transaction; returns them.

    Locks: the held rows, ``FOR NO KEY UPDATE`` in id order, before their open conflicts are
    counted. Intake locks the row of an operation it holds before its transaction commits the new
    conflict, so either this waits and then counts that conflict (the operation stays held), or
    intake waits and then finds the operation released and holds it again. Lock order
    (docs/architecture.md): the conflicts the caller decided, these rows, then the audit chain.
    """
    with transaction.atomic():
        held = lock_held(decisions)
        if not held:
            return []
        still_open = set(
            Conflict.objects.filter(operation__in=held, status=Conflict.Status.OPEN).values_list(
                "operation_id", flat=True
            )
        )
        decided = [operation for operation in held if operation.pk not in still_open]
        origins = held_from([operation.pk for operation in decided])
        released = []
        now = timezone.now()
        for target in HOLDABLE_STATES:
            going = [operation for operation in decided if _back_to(operation, origins) == target]
            released += transition_many(
                going,
                to_state=target,
                actor=actor,
                kind=RELEASED,
                message=[f"released: {decisions[operation.pk]}" for operation in going],
                also_requires={"last_error_category": CONFLICT_HOLD},
                same={"last_error_category": "", "last_error_message": ""},
                each={"deadline": [_fresh_deadline(operation, target, now) for operation in going]},
                now=now,
            )
        for operation in released:
            if operation.state == State.PENDING:
                transaction.on_commit(partial(nudges.enqueue_processing, operation.pk))
        return released


def lock_held(operation_ids) -> list[Operation]:
    """The held operations of ``operation_ids``, their rows locked ``FOR NO KEY UPDATE`` in id order
    until the caller's transaction ends. A decision that audits itself before it releases takes
    these locks first: the rows come before the audit chain (docs/architecture.md)."""
    return list(
        Operation.objects.filter(pk__in=operation_ids, state=State.NEEDS_REVIEW, last_error_category=CONFLICT_HOLD)
        .select_for_update(no_key=True)
        .order_by("pk")
    )


def _back_to(operation: Operation, origins: dict[int, State]) -> State:
    """Where the hold took the operation from; without its event (never written otherwise), the
    safer of the two for a consequential action: an approver signs off again."""
    if operation.pk in origins:
        return origins[operation.pk]
    action = registry.get(operation.action)
    return State.PENDING_APPROVAL if action is None or action.consequential else State.PENDING


def _fresh_deadline(operation: Operation, target: State, now):
    """A full deadline from now (an approval window awaiting approval): the time held, waiting for
    a person, does not count against the operation (as a pause does not)."""
    action = registry.get(operation.action)
    if action is None:
        return operation.deadline
    return now + (action.approval_window if target == State.PENDING_APPROVAL else action.deadline)
