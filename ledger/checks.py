"""System checks for settings that would quietly break the ledger's guarantees."""

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.compatibility)
def check_queue_retry_exceeds_timeout_and_lease(app_configs=None, **kwargs):
    """django-q2 re-delivers a task that is not acknowledged within ``retry`` seconds. If that is
    not longer than the task timeout and the lease, a task still running is run a second time."""
    q_cluster = getattr(settings, "Q_CLUSTER", {})
    retry = q_cluster.get("retry", 60)
    timeout = q_cluster.get("timeout")
    lease = settings.OPSCONSOLE_LEASE_SECONDS
    errors = []
    if timeout is None or retry <= timeout:
        errors.append(
            checks.Error(
                f"Q_CLUSTER['retry'] ({retry}s) must be larger than Q_CLUSTER['timeout'] ({timeout}s).",
                hint="Set Q_RETRY above Q_TIMEOUT, or the queue re-runs tasks that are still running.",
                id="ledger.E001",
            )
        )
    if retry <= lease:
        errors.append(
            checks.Error(
                f"Q_CLUSTER['retry'] ({retry}s) must be larger than OPSCONSOLE_LEASE_SECONDS ({lease}s).",
                hint="A task is re-delivered while its claim's lease still holds the operations.",
                id="ledger.E002",
            )
        )
    return errors
