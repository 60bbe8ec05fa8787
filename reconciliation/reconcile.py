"""Reconciliation of unknown outcomes: before anything is sent again, ask the destination what became of each
operation whose outcome is unknown (docs/design.md rule 6).

found -> succeeded with the destination's record id; confirmed absent -> retrying (same key or
reference); cannot tell -> the operation stays unknown and is asked about again with backoff
(a destination that is briefly down must not bring a person in), until
``OPSCONSOLE_RECONCILE_GIVE_UP_SECONDS`` after its last try began; then needs_review with the
reason. A lookup that can never answer (no lookup, several records carry our key) goes to
needs_review at once. Every lookup is audited. The lookup is a network call, so it runs outside
any transaction; each verdict is a guarded write (the operation must still be unknown).
"""

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ledger import timed
from ledger.actions import ActionDefinition, UnknownAction, get_action
from ledger.core import nudges
from ledger.core.retry import backoff_ceiling
from ledger.core.transitions import record_audit_event, transition_operation
from ledger.engine.lookups import ask_destination, settles_at
from ledger.models import Heartbeat, Operation
from ledger.outcomes import Absent, CannotTell, Found
from ledger.states import State

ACTOR = "reconciler"
# Waits between lookups that could not tell: 30 s, 1, 2, 4, 8 min, then every 10 min.
LOOKUP_BACKOFF_BASE_SECONDS = 30.0
LOOKUP_BACKOFF_CAP_SECONDS = 600.0


@dataclass
class ReconcileReport:
    found: int = 0
    absent: int = 0
    cannot_tell: int = 0  # still unknown, asked again later
    gave_up: int = 0  # sent to needs_review
    settling: int = 0
    not_due: int = 0  # moved or rescheduled meanwhile


def reconcile_unknown_operations(*, now: datetime | None = None, limit: int = 100) -> ReconcileReport:
    """Reconcile up to ``limit`` unknown operations whose next lookup is due, oldest first;
    records a heartbeat."""
    now = now or timezone.now()
    report = ReconcileReport()
    due = (
        Operation.objects.filter(
            Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now),
            state=State.UNKNOWN,
        )
        .select_related("workspace")
        .order_by("updated_at", "id")
    )
    for operation in due[:limit]:
        verdict = reconcile_operation(operation, now=now)
        setattr(report, verdict, getattr(report, verdict) + 1)
    Heartbeat.objects.update_or_create(name="reconcile", defaults={"beat_at": now, "detail": asdict(report)})
    return report


def reconcile_operation(
    operation: Operation, *, now: datetime | None = None, actor: str = ACTOR, asked_by_person: bool = False
) -> str:
    """Ask the destination about one unknown operation and record the verdict; returns its name:
    ``found``, ``absent``, ``cannot_tell`` (asked again later), ``gave_up`` (needs_review),
    ``settling`` (a request may still be landing: not asked yet), or ``not_due``.

    ``asked_by_person``: a person pressed "look up now": the destination is asked whatever the
    schedule says (an "absent" while a request may still land is not believed).
    """
    now = now or timezone.now()
    if operation.state != State.UNKNOWN:
        return "not_due"
    try:
        action = get_action(operation.action)
    except UnknownAction:
        return _give_up(operation, CannotTell(f"action {operation.action!r} is not registered"), actor=actor)
    if not asked_by_person:
        settled = settles_at(operation, action)
        if settled and now < settled:
            return "settling"
        if operation.next_attempt_at and now < operation.next_attempt_at:
            return "not_due"

    answer = ask_destination(operation, action, now=now)  # outside any transaction: the network call
    # Lock order (docs/architecture.md): one operation per transaction below, its row then the chain.
    if isinstance(answer, Found):
        transition_operation(
            operation,
            to_state=State.SUCCEEDED,
            actor=actor,
            kind="reconciled_found",
            message=f"the destination has record {answer.external_id}",
            external_id=answer.external_id,
            result=answer.result,
            next_attempt_at=None,
            last_error_category="",
            last_error_message="",
        )
        return "found"
    if isinstance(answer, Absent):
        with transaction.atomic():
            moved = transition_operation(
                operation,
                to_state=State.RETRYING,
                actor=actor,
                kind="reconciled_absent",
                message="the destination confirms no record; "
                + (
                    "its caller may claim it again under the same key"
                    if action.performed_by_caller
                    else "sending again under the same key"
                ),
                next_attempt_at=now,
            )
            if moved:
                transaction.on_commit(partial(nudges.enqueue_processing, operation.pk))
        return "absent"
    give_up_at = _give_up_at(operation, action)
    if answer.final or now >= give_up_at:
        return _give_up(operation, answer, actor=actor, failed_lookups=_failed_lookups(operation) + 1)
    _ask_again_later(operation, answer, actor=actor, now=now, give_up_at=give_up_at)
    return "cannot_tell"


def lookups_give_up_at(operation: Operation) -> datetime | None:
    """When reconciliation stops asking about this unknown operation and asks a person instead."""
    try:
        return _give_up_at(operation, get_action(operation.action))
    except UnknownAction:
        return None


def _give_up_at(operation: Operation, action: ActionDefinition) -> datetime:
    """When reconciliation stops asking: the give-up time after the last try began."""
    settled = settles_at(operation, action)
    began = settled - action.settle_after if settled else operation.updated_at
    return began + timedelta(seconds=settings.OPSCONSOLE_RECONCILE_GIVE_UP_SECONDS)


def _failed_lookups(operation: Operation) -> int:
    """Lookups that could not tell since the operation last became unknown."""
    became_unknown = (
        operation.audit_events.filter(to_state=State.UNKNOWN).order_by("-id").values_list("id", flat=True).first() or 0
    )
    return operation.audit_events.filter(kind="lookup_failed", id__gt=became_unknown).count()


def _ask_again_later(
    operation: Operation, answer: CannotTell, *, actor: str, now: datetime, give_up_at: datetime
) -> None:
    failed = _failed_lookups(operation) + 1
    wait = backoff_ceiling(failed - 1, base=LOOKUP_BACKOFF_BASE_SECONDS, cap=LOOKUP_BACKOFF_CAP_SECONDS)
    next_lookup = min(now + timedelta(seconds=wait), give_up_at)
    with transaction.atomic():
        # Not a state change: the operation stays unknown, with its next lookup time. Guarded so a
        # verdict recorded meanwhile (another reconciler, a person) is not overwritten.
        rescheduled = Operation.objects.filter(pk=operation.pk, state=State.UNKNOWN).update(
            next_attempt_at=next_lookup,
            last_error_category="unknown",
            last_error_message=f"lookup {failed} failed: {answer.reason}"[:500],
            last_error_times=None,
            updated_at=now,
        )
        if not rescheduled:
            return
        record_audit_event(
            actor=actor,
            kind="lookup_failed",
            operation=operation,
            error_category="unknown",
            message=f"lookup {failed} could not tell ({answer.reason}); next lookup at {{next_lookup}}, "
            "gives up at {give_up_at}",
            times=timed.kept(next_lookup=next_lookup, give_up_at=give_up_at),
        )
        transaction.on_commit(partial(nudges.enqueue_lookup, operation.pk, at=next_lookup))
    operation.next_attempt_at = next_lookup


def _give_up(operation: Operation, answer: CannotTell, *, actor: str, failed_lookups: int = 0) -> str:
    reason = answer.reason
    if failed_lookups > 1:
        reason = f"gave up after {failed_lookups} lookups: {reason}"
    transition_operation(
        operation,
        to_state=State.NEEDS_REVIEW,
        actor=actor,
        kind="reconciliation_inconclusive",
        error_category="unknown",
        message=reason,
        next_attempt_at=None,
        last_error_category="unknown",
        last_error_message=f"reconciliation: {reason}"[:500],
        last_error_times=None,
    )
    return "gave_up"
