"""`make demo`'s last step before serving: waits (bounded) for the work the running qcluster can do,
says what is left waiting and why, then lists what the cluster did."""

import time
from datetime import timedelta

from django.core.management.base import BaseCommand
from django.db.models import Max, Q
from django.utils import timezone

from ledger.actions import registry
from ledger.models import Operation, RequestStatus, ReviewDraft
from ledger.reads import dashboard
from ledger.states import State

# Rows of each kind listed by name; the rest are counted.
SHOWN = 5


class Command(BaseCommand):
    help = "Wait (bounded) for the work the running qcluster can do, then list what it did."

    def add_arguments(self, parser):
        parser.add_argument("--workspace", default="demo")
        parser.add_argument("--wait", type=float, default=30.0, help="Seconds to wait at most.")
        parser.add_argument("--url", default="http://127.0.0.1:8000/")

    def handle(self, *args, workspace, wait, url, **options):
        operations = Operation.objects.filter(workspace__slug=workspace)
        started = timezone.now()
        self._wait_for_the_cluster(operations, wait)
        self._say_what_is_left(operations)
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
        # Only what moved in the last SETTLE is waited for: a second `make demo` waits for nothing.
        moved = operations.filter(state_changed_at__gte=started - dashboard.SETTLE).aggregate(
            last=Max("state_changed_at")
        )
        if moved["last"] is not None:
            time.sleep(max(0.0, (moved["last"] + dashboard.SETTLE - timezone.now()).total_seconds()))
        sampled = dashboard.take_samples(catch_up=dashboard.HOURS + 1)
        said = f"sampled up to {sampled:%H:%M:%S} UTC" if sampled else "the sweep samples it every 5 minutes"
        self.stdout.write(f"Dashboard: {url}console/dashboard/  (the last 24 hours: {said})")

    def _wait_for_the_cluster(self, operations, wait: float) -> None:
        """Until nothing the cluster can do now is left (or ``wait`` seconds): the operations of the
        actions it performs that are pending, processing, or retrying with their try due by then.
        A caller's claim (the demo's INV-1) is no work of the cluster's, nor a retry due later."""
        give_up_at = time.monotonic() + wait
        workable = self._workable(operations, due_by=timezone.now() + timedelta(seconds=wait))
        while workable.exists() and time.monotonic() < give_up_at:
            time.sleep(0.5)
        if workable.exists():
            self.stdout.write(
                f"{workable.count():,} operation(s) the qcluster should have worked still wait after {wait:g} s: "
                "is the qcluster running? (its log: var/qcluster.log)"
            )

    @staticmethod
    def _workable(operations, *, due_by):
        due = Q(state=State.PROCESSING) | Q(
            Q(state__in=[State.PENDING, State.RETRYING]),
            Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=due_by),
        )
        return operations.filter(due).exclude(action__in=_caller_actions())

    def _say_what_is_left(self, operations) -> None:
        """A line for each operation a caller holds or owes, and one for the retries due later."""
        waiting = [State.PENDING, State.PROCESSING, State.RETRYING]
        for operation in operations.filter(state__in=waiting, action__in=_caller_actions()).order_by("id")[:SHOWN]:
            name = operation.payload.get("request_id") or operation.key
            if operation.state == State.PROCESSING and operation.lease_owner:
                self.stdout.write(
                    f"{name} is claimed by a caller that never reports ({operation.lease_owner}): it will show as "
                    "unknown when its lease ends, and reconciliation then looks it up."
                )
            else:
                self.stdout.write(
                    f"{name} waits for a caller to claim it ({operation.action} is performed by its caller, "
                    "not by the qcluster): it stays in the queue until one does."
                )
        later = operations.filter(state__in=[State.PENDING, State.RETRYING]).exclude(action__in=_caller_actions())
        later = later.filter(next_attempt_at__gt=timezone.now())
        if later.exists():
            first = later.order_by("next_attempt_at").values_list("next_attempt_at", flat=True).first()
            self.stdout.write(
                f"{later.count():,} operation(s) wait for a later try (the first at {first:%Y-%m-%d %H:%M} UTC): "
                "the qcluster takes them then."
            )

    def _few(self, rows, line, noun: str) -> None:
        """A line for each of the first ``SHOWN`` rows, then how many more there are."""
        for row in rows[:SHOWN]:
            self.stdout.write(line(row))
        more = rows.count() - SHOWN
        if more > 0:
            self.stdout.write(f"  ... and {more:,} more {noun}")


def _caller_actions() -> list[str]:
    """The actions a caller performs itself (claims, docs/claims.md): the qcluster never runs them."""
    return [name for name, action in registry.items() if action.performed_by_caller]
