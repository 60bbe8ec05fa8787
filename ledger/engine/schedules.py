"""The django-q2 schedules opsconsole relies on, created idempotently by data migrations."""

from datetime import timedelta

from django.utils import timezone

SWEEP_SCHEDULE = "opsconsole-sweep"
RECONCILE_SCHEDULE = "opsconsole-reconcile"
PURGE_SCHEDULE = "opsconsole-purge"
AUDIT_SCHEDULE = "opsconsole-reconcile-audit"
AUDIT_HEADS_SCHEDULE = "opsconsole-audit-heads"


def ensure_schedule(schedule_model, *, name: str, func: str, minutes: int = 1) -> None:
    """Exactly one schedule named ``name``, running ``func`` every ``minutes``, however often this runs.

    ``Schedule.name`` is not unique in django-q2, so duplicates left by two concurrent deployments
    are removed here. ``next_run`` is set so a fresh schedule does not fire at once, and the
    schedule has no ``args``: one schedule with bad args stops every schedule of its cluster.
    """
    schedules = list(schedule_model.objects.filter(name=name).order_by("id"))
    keep = schedules[0] if schedules else schedule_model(name=name)
    for extra in schedules[1:]:
        extra.delete()
    keep.func = func
    keep.args = None
    keep.kwargs = None
    keep.schedule_type = "I"  # MINUTES
    keep.minutes = minutes
    keep.repeats = -1
    if keep.next_run is None or keep.pk is None:
        keep.next_run = timezone.now() + timedelta(minutes=minutes)
    keep.save()


def ensure_sweep_schedule(schedule_model) -> None:
    ensure_schedule(schedule_model, name=SWEEP_SCHEDULE, func="ledger.tasks.sweep")


def ensure_reconcile_schedule(schedule_model) -> None:
    ensure_schedule(schedule_model, name=RECONCILE_SCHEDULE, func="reconciliation.tasks.reconcile")


def ensure_purge_schedule(schedule_model) -> None:
    ensure_schedule(schedule_model, name=PURGE_SCHEDULE, func="ledger.tasks.purge", minutes=24 * 60)


def ensure_audit_schedule(schedule_model) -> None:
    ensure_schedule(schedule_model, name=AUDIT_SCHEDULE, func="reconciliation.tasks.audit", minutes=60)


def ensure_audit_heads_schedule(schedule_model) -> None:
    """The audit chains' heads, exported every 5 minutes (ledger.core.audit_heads): an event cut off
    the end of a chain after an export is found by ``verify_audit --heads``."""
    ensure_schedule(schedule_model, name=AUDIT_HEADS_SCHEDULE, func="ledger.tasks.export_audit_heads", minutes=5)
