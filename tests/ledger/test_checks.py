"""The system check refuses a queue that would re-run tasks still running."""

import pytest
from django.conf import settings
from django.core import checks
from django.test import override_settings

from ledger.checks import check_queue_retry_exceeds_timeout_and_lease


def q_cluster(**changes):
    return {**settings.Q_CLUSTER, **changes}


def ids(errors):
    return [error.id for error in errors]


def test_it_is_silent_for_the_default_settings():
    """The shipped configuration passes: retry above the timeout and the lease."""
    assert check_queue_retry_exceeds_timeout_and_lease() == []


@pytest.mark.parametrize(("retry", "timeout"), [(90, 90), (60, 90)])
def test_it_fails_when_retry_does_not_exceed_the_timeout(retry, timeout):
    """A task still running at `retry` seconds would be handed to a second worker."""
    with override_settings(Q_CLUSTER=q_cluster(retry=retry, timeout=timeout), OPSCONSOLE_LEASE_SECONDS=30):
        errors = check_queue_retry_exceeds_timeout_and_lease()

    assert ids(errors) == ["ledger.E001"]
    assert errors[0].msg == f"Q_CLUSTER['retry'] ({retry}s) must be larger than Q_CLUSTER['timeout'] ({timeout}s)."


def test_it_fails_when_the_task_timeout_is_unset():
    """Without a timeout a task may run past any retry."""
    cluster = {name: value for name, value in settings.Q_CLUSTER.items() if name != "timeout"}
    with override_settings(Q_CLUSTER=cluster):
        assert ids(check_queue_retry_exceeds_timeout_and_lease()) == ["ledger.E001"]


@pytest.mark.parametrize("lease", [120, 300])
def test_it_fails_when_retry_does_not_exceed_the_lease(lease):
    """A task re-delivered while its claim's lease holds finds its operations held by itself."""
    with override_settings(Q_CLUSTER=q_cluster(retry=120, timeout=90), OPSCONSOLE_LEASE_SECONDS=lease):
        errors = check_queue_retry_exceeds_timeout_and_lease()

    assert ids(errors) == ["ledger.E002"]
    assert errors[0].msg == f"Q_CLUSTER['retry'] (120s) must be larger than OPSCONSOLE_LEASE_SECONDS ({lease}s)."


def test_it_reports_both_problems_through_the_check_framework():
    """`manage.py check` sees both errors when retry is below the timeout and the lease."""
    with override_settings(Q_CLUSTER=q_cluster(retry=30, timeout=90), OPSCONSOLE_LEASE_SECONDS=60):
        errors = checks.run_checks(tags=[checks.Tags.compatibility])

    assert {"ledger.E001", "ledger.E002"} <= set(ids(errors))
