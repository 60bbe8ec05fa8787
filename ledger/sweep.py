"""The sweep: the ledger re-drives what lost or dead tasks left behind (docs/design.md rule 7).

django-q2 may lose a task (Redis broker, a killed worker) or deliver it late; the sweep runs every
minute from a django-q2 schedule (``ledger.engine.schedules``) and needs nothing from the queue but that.
"""

from dataclasses import asdict, dataclass, field
from datetime import datetime

from django.utils import timezone

from ledger.core import audit_partitions, held_time, nudges, operation_partitions
from ledger.core.selectors import due_operations, oldest_due_seconds, paused_filter
from ledger.core.transitions import transition_operation
from ledger.engine import expiry
from ledger.intake import ordering
from ledger.models import Heartbeat, Operation
from ledger.people import bulk_actions
from ledger.reads import dashboard
from ledger.states import CLAIMABLE_STATES, State


@dataclass
class SweepReport:
    leases_expired: int = 0
    deadlines_passed: int = 0
    approvals_expired: int = 0
    versions_missing: int = 0
    bulk_actions_stalled: int = 0
    due: int = 0
    nudges: int = 0
    oldest_due_seconds: float | None = None
    sampled: bool = False  # the dashboard's samples were taken (ledger.reads.dashboard)
    audit_partitions_created: list[str] = field(default_factory=list)  # ledger.core.audit_partitions
    operation_partitions_created: list[str] = field(default_factory=list)  # ledger.core.operation_partitions


def sweep(*, now: datetime | None = None, batch: int = 500) -> SweepReport:
    """Re-drive what lost tasks left behind, and record a heartbeat.

    - expired leases: an external try that may have reached the destination becomes unknown; an
      external claim that began no try goes back to pending, not counted as an attempt; an internal
      try goes back to pending, counted (needs review once the attempt limit is reached);
    - passed deadlines: due work that can no longer finish in time goes to needs_review, unless a
      pause holds it, or held it (paused time does not count: ``ledger.core.held_time``);
    - expired approval requests: nobody decided within the action's approval window;
    - in_order versions whose predecessor has not arrived within the gap wait (``ledger.intake.ordering``);
    - bulk actions whose task crashed or was lost are enqueued again (``ledger.people.bulk_actions``);
    - due work (lost nudges, due retries, resumed pauses): enough processing tasks are enqueued;
    - the dashboard's samples, every ``dashboard.EVERY``;
    - the audit trail's partitions for this month and the next three, where missing.
    """
    now = now or timezone.now()
    report = SweepReport()
    # Lock order (docs/architecture.md): each move below is a transaction of its own (a row, then the chain), never a
    # batch at once, which would take the next row while holding the chain.
    for operation in Operation.objects.filter(state=State.PROCESSING, lease_expires_at__lt=now)[:batch]:
        report.leases_expired += expiry.recover_expired_lease(operation, now)
    late = Operation.objects.filter(held_time.deadline_passed(now), state__in=CLAIMABLE_STATES)
    held = paused_filter()
    for operation in (late.exclude(held) if held is not None else late)[:batch]:
        report.deadlines_passed += expiry.send_late_to_review(operation)
    for operation in Operation.objects.filter(state=State.PENDING_APPROVAL, deadline__lte=now)[:batch]:
        report.approvals_expired += transition_operation(
            operation,
            to_state=State.NEEDS_REVIEW,
            actor="sweep",
            kind="approval_expired",
            error_category="approval",
            message="approval expired: nobody approved or rejected it in time",
            last_error_category="approval",
            last_error_message="approval expired",
            next_attempt_at=None,
        )
    report.versions_missing = ordering.send_gaps_to_review(now=now, batch=batch)
    report.bulk_actions_stalled = bulk_actions.redrive_stalled(now=now)
    due = due_operations(now)
    report.due = due.count()
    report.oldest_due_seconds = oldest_due_seconds(now)
    report.nudges = nudges.nudges_for(report.due)
    report.sampled = dashboard.take_samples(now=now) is not None
    report.audit_partitions_created = audit_partitions.create_ahead().created
    report.operation_partitions_created = operation_partitions.create_ahead().created
    Heartbeat.objects.update_or_create(name="sweep", defaults={"beat_at": now, "detail": asdict(report)})
    if report.nudges:
        nudges.enqueue_drain(report.nudges)
    return report
