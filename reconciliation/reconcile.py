"""Reconciliation: before anything is sent again, ask the destination what became of each
operation whose outcome is unknown (DESIGN.md rule 6).

found -> succeeded with the destination's record id; confirmed absent -> retrying (same key or
reference); cannot tell -> needs_review. The lookup is a network call, so it runs outside any
transaction; the verdict is recorded by a guarded transition (the operation must still be unknown).
"""

from dataclasses import asdict, dataclass
from datetime import datetime
from functools import partial

from django.db import transaction
from django.utils import timezone

from ledger import tasks
from ledger.actions import UnknownAction, get_action
from ledger.models import Heartbeat, Operation
from ledger.outcomes import Absent, CannotTell, Found
from ledger.services import transition_operation
from ledger.states import State

ACTOR = "reconciler"


@dataclass
class ReconcileReport:
    found: int = 0
    absent: int = 0
    cannot_tell: int = 0
    settling: int = 0


def reconcile_unknown_operations(*, now: datetime | None = None, limit: int = 100) -> ReconcileReport:
    """Reconcile up to ``limit`` unknown operations, oldest first; records a heartbeat."""
    now = now or timezone.now()
    report = ReconcileReport()
    unknown = Operation.objects.filter(state=State.UNKNOWN).select_related("workspace").order_by("updated_at")
    for operation in unknown[:limit]:
        verdict = reconcile_operation(operation, now=now)
        setattr(report, verdict, getattr(report, verdict) + 1)
    Heartbeat.objects.update_or_create(name="reconcile", defaults={"beat_at": now, "detail": asdict(report)})
    return report


def reconcile_operation(operation: Operation, *, now: datetime | None = None) -> str:
    """Ask the destination about one unknown operation and record the verdict; returns its name
    (``found``, ``absent``, ``cannot_tell``, or ``settling`` when a request may still be landing)."""
    now = now or timezone.now()
    try:
        action = get_action(operation.action)
    except UnknownAction:
        _cannot_tell(operation, CannotTell(f"action {operation.action!r} is not registered"))
        return "cannot_tell"
    last_try = operation.attempt_rows.order_by("-fencing_token").values_list("started_at", flat=True).first()
    if last_try and now < last_try + action.settle_after:
        return "settling"

    answer = action.lookup(operation)  # outside any transaction: this is the network call
    if isinstance(answer, Found):
        transition_operation(
            operation, to_state=State.SUCCEEDED, actor=ACTOR, kind="reconciled_found",
            message=f"the destination has record {answer.external_id}",
            external_id=answer.external_id, result=answer.result, next_attempt_at=None,
            last_error_category="", last_error_message="",
        )
        return "found"
    if isinstance(answer, Absent):
        with transaction.atomic():
            moved = transition_operation(
                operation, to_state=State.RETRYING, actor=ACTOR, kind="reconciled_absent",
                message="the destination confirms no record; sending again under the same key",
                next_attempt_at=now,
            )
            if moved:
                transaction.on_commit(partial(tasks.enqueue_processing, operation.pk))
        return "absent"
    _cannot_tell(operation, answer)
    return "cannot_tell"


def _cannot_tell(operation: Operation, answer: CannotTell) -> None:
    transition_operation(
        operation, to_state=State.NEEDS_REVIEW, actor=ACTOR, kind="reconciliation_inconclusive",
        error_category="unknown", message=answer.reason,
        last_error_category="unknown", last_error_message=f"reconciliation: {answer.reason}"[:500],
    )
