"""The reconciliation results the dashboard shows (reconciliation.selectors.results)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.models import Membership, Workspace
from reconciliation import selectors
from reconciliation.models import Mismatch, ReconciliationRun

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(workspace, django_user_model):
    user = django_user_model.objects.create_user("viewer")
    Membership.objects.create(user=user, workspace=workspace, role="viewer")
    return user


def a_run(started_at, status="succeeded"):
    return ReconciliationRun.objects.create(
        started_at=started_at, since=started_at - timedelta(hours=1), until=started_at, status=status
    )


def found(run, workspace, kind, reference, **fields):
    return Mismatch.objects.create(
        run=run, workspace=workspace, action="send-notice", kind=kind, reference=reference, **fields
    )


def test_it_counts_the_open_mismatches_of_the_persons_workspaces_by_kind(workspace, viewer):
    other = Workspace.objects.create(slug="other")
    run = a_run(timezone.now())
    found(run, workspace, "missing_at_destination", "demo:R-1")
    found(run, workspace, "missing_at_destination", "demo:R-2")
    found(run, workspace, "content_differs", "demo:R-3")
    found(
        run,
        workspace,
        "unknown_to_ledger",
        "demo:R-4",
        status="acknowledged",
        decided_by="alice",
        decided_at=timezone.now(),
    )
    found(run, other, "unknown_to_ledger", "other:R-5")

    results = selectors.results(viewer)
    assert results.open_mismatches == {
        "missing_at_destination": 2,
        "unknown_to_ledger": 0,
        "content_differs": 1,
        "destination_reset": 0,
    }
    assert (results.open_total, results.capped) == (3, False)


def test_the_count_is_bounded(workspace, viewer, monkeypatch):
    run = a_run(timezone.now())
    for number in range(4):
        found(run, workspace, "unknown_to_ledger", f"demo:R-{number}")
    monkeypatch.setattr(selectors, "COUNT_CAP", 2)
    results = selectors.results(viewer)
    assert (results.open_total, results.capped) == (2, True)


def test_it_lists_the_latest_runs_first_at_most_five(viewer):
    now = timezone.now()
    runs = [a_run(now - timedelta(hours=hours)) for hours in range(7)]
    assert selectors.results(viewer).runs == runs[: selectors.RECENT_RUNS]
