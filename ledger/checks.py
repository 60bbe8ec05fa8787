"""System checks for settings that would quietly break the ledger's guarantees, and (with
``--database default``, and at ``migrate``) for configuration saved before a rule that now refuses it."""

from django.conf import settings
from django.core import checks
from django.db import connection

from ledger.actions import secret_names
from ledger.models import Source


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


@checks.register(checks.Tags.database)
def check_source_secrets_are_their_workspaces(app_configs=None, databases=None, **kwargs):
    """Sources saved before a source could name only its workspace's variables: their deliveries are
    refused (``ledger.integrations.sources.SecretNotOwned``) until the variable is renamed."""
    if "default" not in (databases or ()) or Source._meta.db_table not in connection.introspection.table_names():
        return []
    # Only the columns it reads: `manage.py migrate` runs the checks before it migrates, against the
    # tables as the release before left them (a column the models have gained is not there yet).
    sources = Source.objects.select_related("workspace").only(
        "slug", "secret_env", "previous_secret_env", "workspace__slug"
    )
    foreign = [
        f"{source.slug} (workspace {source.workspace.slug}): {name}"
        for source in sources.order_by("slug")
        for name in filter(None, (source.secret_env, source.previous_secret_env))
        if secret_names.name_problem(source.workspace, name)
    ]
    if not foreign:
        return []
    return [
        checks.Warning(
            "These sources name a secret outside their workspace's variables, and their deliveries are "
            "refused: " + "; ".join(foreign),
            hint=f"Rename each variable to start with its workspace's prefix ({secret_names.PREFIX}<WORKSPACE>_) "
            "and apply the sources again: docs/operations.md, Source secrets.",
            id="ledger.W001",
        )
    ]
