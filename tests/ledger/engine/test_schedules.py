"""One sweep schedule, however often it is ensured."""

from datetime import timedelta

from django.utils import timezone
from django_q.models import Schedule

from ledger.engine.schedules import SWEEP_SCHEDULE, ensure_sweep_schedule


def assert_one_sweep_schedule(*, not_before):
    schedule = Schedule.objects.get(name=SWEEP_SCHEDULE)
    assert (schedule.func, schedule.args, schedule.kwargs) == ("ledger.tasks.sweep", None, None)
    assert (schedule.schedule_type, schedule.minutes, schedule.repeats) == (Schedule.MINUTES, 1, -1)
    assert schedule.next_run > not_before
    return schedule


def test_it_creates_one_schedule_that_does_not_fire_at_once(db):
    """A fresh schedule waits a minute: a migration must not start a sweep mid-deploy."""
    Schedule.objects.filter(name=SWEEP_SCHEDULE).delete()
    before = timezone.now()

    ensure_sweep_schedule(Schedule)
    ensure_sweep_schedule(Schedule)

    schedule = assert_one_sweep_schedule(not_before=before)
    assert schedule.next_run >= before + timedelta(minutes=1)


def test_it_keeps_an_existing_schedule_as_it_is(db):
    """Running it again (a re-run migration, a second deployment) changes nothing."""
    ensure_sweep_schedule(Schedule)  # the migration ran it; a transactional test may have flushed it since
    created = Schedule.objects.get(name=SWEEP_SCHEDULE)

    ensure_sweep_schedule(Schedule)

    kept = Schedule.objects.get(name=SWEEP_SCHEDULE)
    assert (kept.pk, kept.next_run) == (created.pk, created.next_run)


def test_it_removes_duplicates_and_repairs_bad_arguments(db):
    """Two concurrent deployments may leave two; one with bad args would stop every schedule."""
    Schedule.objects.filter(name=SWEEP_SCHEDULE).delete()
    later = timezone.now() + timedelta(minutes=5)
    Schedule.objects.create(
        name=SWEEP_SCHEDULE, func="ledger.tasks.sweep", args="oops(", next_run=later, schedule_type=Schedule.HOURLY
    )
    Schedule.objects.create(name=SWEEP_SCHEDULE, func="ledger.tasks.sweep", next_run=later)
    unrelated = Schedule.objects.create(name="someone-else", func="app.tasks.nightly")

    ensure_sweep_schedule(Schedule)

    assert_one_sweep_schedule(not_before=timezone.now())
    assert Schedule.objects.filter(pk=unrelated.pk).exists()
