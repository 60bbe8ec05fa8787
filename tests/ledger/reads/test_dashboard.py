"""The dashboard's figures (ledger.reads.dashboard): what the sweep samples from the audit trail, and what
a person sees of it, over 24 hours of their own workspaces."""

from datetime import timedelta

import pytest
from django.utils import timezone

import ledger.tasks  # noqa: F401  (ledger.processing imports it first: a circular import otherwise)
from ledger import retention
from ledger.core import tallies
from ledger.engine.processing import process_due_operations
from ledger.models import BacklogSample, FlowSample, Heartbeat, Membership, Operation, Workspace
from ledger.outcomes import PermanentError, TransientError
from ledger.people import pause
from ledger.reads import dashboard
from ledger.reads.dashboard import figures, take_samples
from ledger.sweep import sweep
from tests.ledger.conftest import START, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(django_user_model):
    return django_user_model.objects.create_superuser("root", email=None, password=None)


@pytest.fixture
def action(scripted_action):
    return scripted_action()


def at(frozen, moment):
    frozen.move_to(moment, tick=False)


def finish(workspace, action, request_id, *replies):
    """Submit an operation and let a worker try it once, the destination answering ``replies``."""
    action.destination.answer(*replies)
    operation = submit(workspace, action.name, request_id=request_id)
    process_due_operations(worker="w1")
    operation.refresh_from_db()
    return operation


def sample_all(now=None):
    """Every sample due up to now (a first sample catches up a whole day, CATCH_UP hours a sweep)."""
    while take_samples(now=now) not in (None, (now or timezone.now()) - dashboard.SETTLE):
        pass


def test_an_operation_that_finished_25_hours_ago_is_not_counted(frozen, workspace, action, root):
    at(frozen, START - timedelta(hours=25))
    finish(workspace, action, "R-old")
    at(frozen, START - timedelta(hours=1))
    finish(workspace, action, "R-new")
    at(frozen, START)
    sample_all()

    seen = figures(root)
    assert seen.finished == 1
    assert [count.count for count in seen.states if count.state == "succeeded"] == [1]
    by_hour = {hour.start: hour.finished for hour in seen.hours}
    assert by_hour[START - timedelta(hours=1)] == 1
    assert sum(by_hour.values()) == 1
    assert seen.since == START - timedelta(hours=23)
    assert len(seen.hours) == 24


def test_the_window_moves_on_with_the_hours(frozen, workspace, action, root):
    at(frozen, START - timedelta(hours=1))
    finish(workspace, action, "R-1")
    at(frozen, START)
    sample_all()
    assert figures(root).finished == 1
    assert figures(root, now=START + timedelta(hours=23, minutes=59)).finished == 0


def test_failure_rates_are_failed_attempts_over_attempts_by_action_and_destination(
    frozen, workspace, scripted_action, root
):
    internal, external = scripted_action(), scripted_action(external=True, honours_idempotency_keys=True)
    at(frozen, START - timedelta(hours=2))
    finish(workspace, internal, "R-1")
    finish(workspace, internal, "R-2", PermanentError("no such owner"))
    finish(workspace, internal, "R-3")
    finish(workspace, internal, "R-4")
    finish(workspace, external, "R-5", TransientError("timeout"))
    at(frozen, START)
    sample_all()

    seen = figures(root)
    rates = {rate.name: (rate.attempts, rate.failures) for rate in seen.by_action}
    assert rates == {internal.name: (4, 1), external.name: (1, 1)}
    assert [rate.percent for rate in seen.by_action if rate.name == internal.name] == [25.0]
    destinations = {rate.name: (rate.attempts, rate.failures) for rate in seen.by_destination}
    assert destinations == {"internal": (4, 1), tallies.destination(external.name): (1, 1)}
    assert (seen.attempts, seen.failures) == (5, 2)


def test_counts_by_state_name_every_state_the_unfinished_ones_now_and_bounded(
    frozen, workspace, action, root, monkeypatch
):
    at(frozen, START)
    for number in range(3):
        submit(workspace, action.name, request_id=f"R-{number}")
    needing = submit(workspace, action.name, request_id="R-9")
    Operation.objects.filter(pk=needing.pk).update(state="needs_review")
    monkeypatch.setattr(dashboard, "COUNT_CAP", 2)

    seen = figures(root)
    states = {count.state: count for count in seen.states}
    assert list(states) == [state.value for state in dashboard.State]
    assert (states["pending"].count, states["pending"].capped) == (2, True)
    assert (states["needs_review"].count, states["needs_review"].capped) == (1, False)
    assert states["succeeded"].finished
    assert not states["pending"].finished
    assert (seen.backlog_now, seen.backlog_capped) == (3, True)


def test_the_backlog_is_sampled_live_and_an_hour_without_a_sample_has_none(frozen, workspace, action, root):
    at(frozen, START - timedelta(hours=3))
    submit(workspace, action.name, request_id="R-1")
    submit(workspace, action.name, request_id="R-2")
    at(frozen, START - timedelta(hours=2, minutes=50))
    sample_all()
    at(frozen, START)
    sample_all()

    backlog = {hour.start: hour.backlog for hour in figures(root).hours}
    assert backlog[START - timedelta(hours=3)] == 2  # the hour's last sample
    assert backlog[START - timedelta(hours=2)] is None
    assert backlog[START - timedelta(hours=1)] == 2  # sampled at START - SETTLE


def test_samples_are_taken_every_few_minutes_and_no_interval_twice(frozen, workspace, action):
    at(frozen, START)
    sample_all()
    finish(workspace, action, "R-1")
    at(frozen, START + timedelta(minutes=2))
    assert take_samples() is None  # too soon
    at(frozen, START + timedelta(minutes=6))
    assert take_samples() == START + timedelta(minutes=6) - dashboard.SETTLE
    assert take_samples() is None
    assert sum(FlowSample.objects.values_list("succeeded", flat=True)) == 1
    assert Heartbeat.objects.get(name=dashboard.HEARTBEAT).beat_at == START + timedelta(minutes=6) - dashboard.SETTLE


def test_an_interval_is_cut_at_each_hour_so_each_sample_lies_in_one_hour(frozen, workspace, action):
    at(frozen, START - timedelta(minutes=3))
    sample_all()
    at(frozen, START - timedelta(minutes=1))
    finish(workspace, action, "R-1")
    at(frozen, START + timedelta(minutes=1))
    finish(workspace, action, "R-2")
    at(frozen, START + timedelta(minutes=5))
    sample_all()
    assert sorted(FlowSample.objects.values_list("hour", "succeeded")) == [(START - timedelta(hours=1), 1), (START, 1)]
    assert all(
        sample.hour <= sample.since < sample.until <= sample.hour + timedelta(hours=1)
        for sample in FlowSample.objects.all()
    )


def test_a_first_sample_catches_up_a_bounded_number_of_hours_per_sweep(frozen, workspace, action):
    at(frozen, START - timedelta(hours=20))
    finish(workspace, action, "R-1")
    at(frozen, START)
    assert take_samples(catch_up=2) == START - timedelta(hours=22)
    assert not FlowSample.objects.exists()
    assert not BacklogSample.objects.exists()
    sample_all()
    assert FlowSample.objects.get().hour == START - timedelta(hours=20)
    assert BacklogSample.objects.filter(at=START - dashboard.SETTLE).exists()


def test_a_viewer_of_one_workspace_sees_only_its_figures(frozen, workspace, action, django_user_model):
    other = Workspace.objects.create(slug="other")
    viewer = django_user_model.objects.create_user("viewer")
    Membership.objects.create(user=viewer, workspace=workspace, role="viewer")
    at(frozen, START - timedelta(hours=1))
    finish(workspace, action, "R-1")
    finish(other, action, "R-2")
    finish(other, action, "R-3", PermanentError("refused"))
    submit(other, action.name, request_id="R-4")
    at(frozen, START)
    sample_all()

    seen = figures(viewer)
    assert (seen.finished, seen.attempts, seen.failures, seen.backlog_now) == (1, 1, 0, 0)
    assert {hour.backlog for hour in seen.hours} == {None, 0}
    assert seen.oldest_due_seconds is None


def test_oldest_waiting_ages_keep_due_and_held_work_apart_within_the_persons_workspaces(
    frozen, workspace, action, django_user_model, root
):
    other = Workspace.objects.create(slug="other")
    viewer = django_user_model.objects.create_user("viewer")
    Membership.objects.create(user=viewer, workspace=workspace, role="viewer")
    at(frozen, START - timedelta(minutes=30))
    submit(other, action.name, request_id="R-other")
    at(frozen, START - timedelta(minutes=10))
    submit(workspace, action.name, request_id="R-due")
    pause.set_paused(paused=True, actor="alice", reason="maintenance", workspace=other)
    at(frozen, START)

    mine, everyone = figures(viewer), figures(root)
    assert (mine.oldest_due_seconds, mine.oldest_held_seconds, mine.held) == (600, None, 0)
    assert (everyone.oldest_due_seconds, everyone.oldest_held_seconds, everyone.held) == (600, 1800, 1)


def test_the_sweep_takes_the_samples(frozen, workspace, action):
    at(frozen, START - timedelta(minutes=10))
    sample_all()
    at(frozen, START)
    finish(workspace, action, "R-1")
    at(frozen, START + timedelta(minutes=1))
    report = sweep()
    assert report.sampled
    assert FlowSample.objects.get().succeeded == 1
    assert not sweep().sampled


def test_the_purge_forgets_samples_older_than_two_days(frozen, workspace, action):
    at(frozen, START - timedelta(days=3))
    finish(workspace, action, "R-1")
    at(frozen, START - timedelta(days=3) + timedelta(minutes=10))
    sample_all()
    at(frozen, START - timedelta(hours=1))
    finish(workspace, action, "R-2")
    at(frozen, START)
    sample_all()
    assert FlowSample.objects.count() == 2

    report = retention.purge()
    assert report.samples_forgotten >= 2
    assert list(FlowSample.objects.values_list("hour", flat=True)) == [START - timedelta(hours=1)]
    assert not BacklogSample.objects.filter(at__lt=START - dashboard.KEEP).exists()
