"""The django-q2 schedules the ledger relies on, created idempotently."""

from datetime import timedelta

from django.utils import timezone

SWEEP_SCHEDULE = "opsconsole-sweep"


def ensure_sweep_schedule(schedule_model) -> None:
    """Exactly one sweep schedule, every minute, however often this runs.

    ``Schedule.name`` is not unique in django-q2, so duplicates left by two concurrent deployments
    are removed here. ``next_run`` is set so a fresh schedule does not fire at once, and the
    schedule has no ``args``: one schedule with bad args stops every schedule of its cluster.
    """
    schedules = list(schedule_model.objects.filter(name=SWEEP_SCHEDULE).order_by("id"))
    keep = schedules[0] if schedules else schedule_model(name=SWEEP_SCHEDULE)
    for extra in schedules[1:]:
        extra.delete()
    keep.func = "ledger.tasks.sweep"
    keep.args = None
    keep.kwargs = None
    keep.schedule_type = "I"  # MINUTES
    keep.minutes = 1
    keep.repeats = -1
    if keep.next_run is None or keep.pk is None:
        keep.next_run = timezone.now() + timedelta(minutes=1)
    keep.save()
