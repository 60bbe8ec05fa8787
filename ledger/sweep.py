"""The sweep: the ledger re-drives what lost or dead tasks left behind (docs/design.md rule 7).

django-q2 may lose a task (Redis broker, a killed worker) or deliver it late; the sweep runs every
minute from a django-q2 schedule (``ledger.engine.schedules``) and needs nothing from the queue but that.
"""

from dataclasses import asdict, dataclass
from datetime import datetime
from functools import partial

from django.db import transaction
from django.utils import timezone

from ledger.actions import UnknownAction, get_action
from ledger.core import nudges
from ledger.core.selectors import due_operations, oldest_due_seconds, paused_filter
from ledger.core.transitions import transition_operation
from ledger.engine.attempts import finish_attempt
from ledger.intake import ordering
from ledger.models import Attempt, Heartbeat, Operation
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


def sweep(*, now: datetime | None = None, batch: int = 500) -> SweepReport:
    """Re-drive what lost tasks left behind, and record a heartbeat.

    - expired leases: an external try that may have reached the destination becomes unknown; an
      external claim that began no try goes back to pending, not counted as an attempt; an internal
      try goes back to pending, counted (needs review once the attempt limit is reached);
    - passed deadlines: due work that can no longer finish in time goes to needs_review, unless a
      pause holds it (paused time does not count: resuming gives it back, ``set_paused``);
    - expired approval requests: nobody decided within the action's approval window;
    - in_order versions whose predecessor has not arrived within the gap wait (``ledger.intake.ordering``);
    - bulk actions whose task crashed or was lost are enqueued again (``ledger.people.bulk_actions``);
    - due work (lost nudges, due retries, resumed pauses): enough processing tasks are enqueued;
    - the dashboard's samples, every ``dashboard.EVERY``.
    """
    now = now or timezone.now()
    report = SweepReport()
    # Lock order (docs/architecture.md): each move below is a transaction of its own (a row, then the chain), never a
    # batch at once, which would take the next row while holding the chain.
    for operation in Operation.objects.filter(state=State.PROCESSING, lease_expires_at__lt=now)[:batch]:
        report.leases_expired += _recover_expired_lease(operation, now)
    late = Operation.objects.filter(state__in=CLAIMABLE_STATES, deadline__lte=now)
    held = paused_filter()
    for operation in (late.exclude(held) if held is not None else late)[:batch]:
        report.deadlines_passed += transition_operation(
            operation,
            to_state=State.NEEDS_REVIEW,
            actor="sweep",
            kind="deadline_passed",
            error_category="deadline",
            message="processing deadline passed before the operation ran",
            last_error_category="deadline",
            last_error_message="processing deadline passed",
            next_attempt_at=None,
        )
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
    Heartbeat.objects.update_or_create(name="sweep", defaults={"beat_at": now, "detail": asdict(report)})
    if report.nudges:
        nudges.enqueue_drain(report.nudges)
    return report


# Why an internal operation whose worker died holding it, try after try, stops for review.
WORKER_STOPPED = "the worker stopped before it recorded an outcome (its lease expired)"


def _recover_expired_lease(operation: Operation, now: datetime) -> bool:
    """An expired claim back to work, counted as what it was.

    - An external try that began (its open Attempt) may have reached the destination: unknown, the
      attempt abandoned; reconciliation asks the destination.
    - An external claim that began no try (a call opens its Attempt first) was no attempt: pending,
      and the claim gives back the count it took, so lease expiries do not spend ``max_attempts``.
    - An internal claim was a try: its effect ran in the worker's transaction and died with it,
      leaving no row. It keeps its count (the operation page says how many tries left no row), so
      an action that kills its worker every time stops at ``max_attempts``, for review, instead of
      being claimed again until its deadline.
    """
    token = operation.fencing_token
    open_attempt = Attempt.objects.filter(operation=operation, fencing_token=token, finished_at__isnull=True).first()
    action = _action_or_none(operation.action)
    external = action is not None and action.external
    reached_destination = external and open_attempt is not None
    message = f"lease of {operation.lease_owner or 'a worker'} expired (claim {token})"
    to_state, category, fields = State.PENDING, "", {}
    if reached_destination:
        to_state, category = State.UNKNOWN, "ambiguous"
        # Reconciliation asks the destination once the abandoned request can no longer land.
        fields["next_attempt_at"] = max(now, open_attempt.started_at + action.settle_after)
    elif external:
        fields["attempts"] = max(operation.attempts - 1, 0)
    elif action is not None and operation.attempts >= action.max_attempts:
        # Its own failure group in the queue: every operation whose worker died this way.
        why = f"attempt limit reached ({operation.attempts} of {action.max_attempts}): {WORKER_STOPPED}"
        to_state, category = State.NEEDS_REVIEW, "transient"
        fields.update(next_attempt_at=None, last_error_category=category, last_error_message=why)
        message = f"{message}: {why}"
    with transaction.atomic():
        # Lock order (docs/architecture.md): the rows (the attempt, then the operation), then the
        # tallies (the abandoned try counted with the move), then the chain; undone below if the
        # transition finds the claim gone.
        if open_attempt is not None:
            finish_attempt(open_attempt, Attempt.Outcome.ABANDONED, counted=False)
        done = transition_operation(
            operation,
            to_state=to_state,
            actor="sweep",
            kind="lease_expired",
            fencing_token=token,
            error_category=category,
            message=message,
            attempt_outcome=Attempt.Outcome.ABANDONED if open_attempt is not None else None,
            lease_owner="",
            lease_expires_at=None,
            **fields,
        )
        if not done:
            transaction.set_rollback(True)
        elif reached_destination:
            transaction.on_commit(partial(nudges.enqueue_lookup, operation.pk, at=fields["next_attempt_at"]))
    return done


def _action_or_none(action_name: str):
    try:
        return get_action(action_name)
    except UnknownAction:
        return None
