import json
from dataclasses import asdict

from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_datetime

from reconciliation.models import Mismatch
from reconciliation.reconcile import reconcile_unknown_operations
from reconciliation.two_way_audit import AuditError, run_audit


class Command(BaseCommand):
    help = (
        "Ask the destinations about every operation whose outcome is unknown (the qcluster does it each "
        "minute); with --audit, compare the ledger and the destinations both ways (hourly on the qcluster)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--audit",
            action="store_true",
            help="run the reconciliation audit instead: missing, unknown and differing records",
        )
        parser.add_argument(
            "--since",
            help="with --audit: the window's start, ISO 8601 with a UTC offset "
            "(default: where the previous successful audit ended, or 24 h)",
        )

    def handle(self, *args, audit, since, **options):
        if since is not None and not audit:
            raise CommandError("--since applies to the audit only: add --audit.")
        if not audit:
            self.stdout.write(json.dumps(asdict(reconcile_unknown_operations())))
            return
        try:
            run = run_audit(since=_aware(since) if since is not None else None)
        except AuditError as exc:
            raise CommandError(str(exc)) from None
        counts = {kind: getattr(run, kind) for kind in Mismatch.Kind.values}
        self.stdout.write(
            json.dumps(
                {
                    "run": run.pk,
                    "status": run.status,
                    "since": run.since.isoformat(),
                    "until": run.until.isoformat(),
                    "records_seen": run.records_seen,
                    "operations_checked": run.operations_checked,
                    **counts,
                    "new_mismatches": run.new_mismatches,
                    "duration_seconds": run.duration.total_seconds(),
                    **({"error": run.error} if run.error else {}),
                }
            )
        )
        if run.status != run.Status.SUCCEEDED:
            raise CommandError(f"The audit failed: {run.error}")


def _aware(text: str):
    try:
        value = parse_datetime(text)
    except ValueError:
        value = None
    if value is None:
        raise CommandError(f"--since {text!r} is not a date and time: use ISO 8601, e.g. 2030-01-01T12:00:00+00:00.")
    if value.tzinfo is None:
        raise CommandError(f"--since {text!r} has no UTC offset: add one, e.g. +00:00.")
    return value
