import time

from django.core.management.base import BaseCommand

from ledger.actions import registry
from ledger.models import Operation, RequestStatus, ReviewDraft
from ledger.reads import dashboard
from ledger.states import State

# Rows of each kind listed by name; the rest are counted.
SHOWN = 5


class Command(BaseCommand):
    help = "Wait (bounded) for the running qcluster to work the demo's operations, then list what it did."

    def add_arguments(self, parser):
        parser.add_argument("--workspace", default="demo")
        parser.add_argument("--wait", type=float, default=30.0, help="Seconds to wait at most.")
        parser.add_argument("--url", default="http://127.0.0.1:8000/")

    def handle(self, *args, workspace, wait, url, **options):
        waiting = Operation.objects.filter(
            workspace__slug=workspace, state__in=[State.PENDING, State.PROCESSING, State.RETRYING]
        )
        give_up_at = time.monotonic() + wait
        while waiting.exists() and time.monotonic() < give_up_at:
            time.sleep(0.5)
        if waiting.exists():
            self.stdout.write(f"{waiting.count()} operation(s) still waiting: is the qcluster running?")
        # The first few of each, then a count: after a demo-day there are thousands, and a line each
        # would push the console's URL and the token demo_setup printed out of sight.
        drafts = ReviewDraft.objects.filter(workspace__slug=workspace).select_related("operation").order_by("id")
        self._few(
            drafts,
            lambda draft: (
                f"Prepared by the qcluster: draft-{draft.pk} {draft.title!r} "
                f"(owner {draft.owner}) for {draft.operation.key}"
            ),
            "drafts",
        )
        statuses = RequestStatus.objects.filter(workspace__slug=workspace).order_by("request_id")
        self._few(
            statuses,
            lambda status: (
                f"Latest status (update-status, latest wins): {status.request_id} is {status.status} "
                f"(version {status.version})"
            ),
            "latest statuses",
        )
        superseded = Operation.objects.filter(workspace__slug=workspace, state=State.SUPERSEDED).order_by("id")
        self._few(superseded, lambda operation: f"Superseded before it ran: {operation.key}", "superseded")
        external_actions = [name for name, action in registry.items() if action.external]
        external = Operation.objects.filter(workspace__slug=workspace, action__in=external_actions).order_by("id")

        def where(operation):
            at = f"record {operation.external_id}" if operation.external_id else operation.state
            return f"External: {operation.key} -> stand-in destination: {at}"

        self._few(external, where, f"external operations (the queue: {url}console/)")
        # The dashboard's hourly figures are the sweep's samples (every 5 minutes): take the first
        # now, once what just finished has settled, so the dashboard shows the demo's work at once.
        time.sleep(dashboard.SETTLE.total_seconds())
        sampled = dashboard.take_samples(catch_up=dashboard.HOURS + 1)
        said = f"sampled up to {sampled:%H:%M:%S} UTC" if sampled else "the sweep samples it every 5 minutes"
        self.stdout.write(f"Dashboard: {url}console/dashboard/  (the last 24 hours: {said})")

    def _few(self, rows, line, noun: str) -> None:
        """A line for each of the first ``SHOWN`` rows, then how many more there are."""
        for row in rows[:SHOWN]:
            self.stdout.write(line(row))
        more = rows.count() - SHOWN
        if more > 0:
            self.stdout.write(f"  ... and {more:,} more {noun}")
