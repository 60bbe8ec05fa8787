"""The sweep: the ledger re-drives what lost or dead tasks left behind (DESIGN.md rule 7).

django-q2 may lose a task (Redis broker, a killed worker) or deliver it late; the sweep runs every
minute from a django-q2 schedule (``ledger.schedules``) and needs nothing from the queue but that.
"""

from dataclasses import asdict, dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from ledger.actions import UnknownAction, get_action
from ledger.models import Attempt, Heartbeat, Operation
from ledger.processing import due_operations, finish_attempt, oldest_due_seconds
from ledger.services import transition_operation
from ledger.states import CLAIMABLE_STATES, State


@dataclass
class SweepReport:
    leases_expired: int = 0
    deadlines_passed: int = 0
    due: int = 0
    nudges: int = 0
    oldest_due_seconds: float | None = None


def sweep(*, now: datetime | None = None, batch: int = 500) -> SweepReport:
    """Re-drive what lost tasks left behind, and record a heartbeat.

    - expired leases: internal actions (and external ones that never began a try) go back to
      pending; an external try that may have reached the destination becomes unknown;
    - passed deadlines: due work that can no longer finish in time goes to needs_review;
    - due work (lost nudges, due retries, resumed pauses): enough processing tasks are enqueued.
    """
    from ledger import tasks

    now = now or timezone.now()
    report = SweepReport()
    for operation in Operation.objects.filter(state=State.PROCESSING, lease_expires_at__lt=now)[:batch]:
        report.leases_expired += _recover_expired_lease(operation)
    for operation in Operation.objects.filter(state__in=CLAIMABLE_STATES, deadline__lte=now)[:batch]:
        report.deadlines_passed += transition_operation(
            operation, to_state=State.NEEDS_REVIEW, actor="sweep", kind="deadline_passed",
            error_category="deadline", message="processing deadline passed before the operation ran",
            last_error_category="deadline", last_error_message="processing deadline passed",
            next_attempt_at=None,
        )
    due = due_operations(now)
    report.due = due.count()
    report.oldest_due_seconds = oldest_due_seconds(now)
    report.nudges = tasks.nudges_for(report.due)
    Heartbeat.objects.update_or_create(name="sweep", defaults={"beat_at": now, "detail": asdict(report)})
    if report.nudges:
        tasks.enqueue_drain(report.nudges)
    return report


def _recover_expired_lease(operation: Operation) -> bool:
    token = operation.fencing_token
    open_attempt = Attempt.objects.filter(operation=operation, fencing_token=token, finished_at__isnull=True).first()
    action_external = _is_external(operation.action)
    reached_destination = action_external and open_attempt is not None
    to_state = State.UNKNOWN if reached_destination else State.PENDING
    message = f"lease of {operation.lease_owner or 'a worker'} expired (claim {token})"
    with transaction.atomic():
        done = transition_operation(
            operation, to_state=to_state, actor="sweep", kind="lease_expired", fencing_token=token,
            error_category="ambiguous" if reached_destination else "", message=message,
            lease_owner="", lease_expires_at=None,
        )
        if done and open_attempt is not None:
            finish_attempt(open_attempt, Attempt.Outcome.ABANDONED)
    return done


def _is_external(action_name: str) -> bool:
    try:
        return get_action(action_name).external
    except UnknownAction:
        return False
