"""Prometheus metrics (prometheus-client), read from the database at each scrape by one collector,
with queries that stay cheap however many operations have finished: every one reads unfinished
work only, through the indexes that lead with the state (operation_state_idx) or hold only the
operations waiting for a person (operation_attention_idx). The oldest due per action, which a day's
backlog would make a minimum over 100,000 rows, is the first due entry of the action's range of
operation_due_since_idx (``selectors.oldest_due_by_action``).

- ``opsconsole_operations{action,state}``: unfinished operations (finished ones are not counted
  per scrape: that would read the whole table);
- ``opsconsole_oldest_retryable_age_seconds{action,held}``: how long the oldest operation that is
  due (pending, or retrying past its time) has waited, per action, a caller-performed action's
  waiting for its caller's claim too; ``held="true"``: the ones a
  pause holds, which would otherwise hide behind a 0;
- ``opsconsole_review_items{workspace,action,reason}``: what waits for a person: needs_review,
  unknown, pending_approval, and open conflicts (reason ``conflict``);
- ``opsconsole_reconciliation_mismatches{kind}``: open findings of the reconciliation audit;
- counters the workers keep (``ledger.core.tallies``): attempts and failures, processing time from
  arrival to a final state (a histogram around each action's service level), late operations;
- ``opsconsole_oldest_due_seconds``, ``opsconsole_open_conflicts``, and the heartbeat ages of the
  sweep, the reconciler and the purge (the ledger's own liveness signals);
- the requests this web server answered, by route template and status (``opsconsole.requests_metrics``).

Label values are escaped by the library. Every metric is described in docs/operations.md.
Served only to a scraper that presents ``OPSCONSOLE_METRICS_TOKEN`` as a bearer token
(Prometheus' ``authorization: {credentials: ...}``); without that setting ``/metrics`` is off (404).
"""

import hmac
import json
from collections import Counter

from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.http import Http404, HttpResponse
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from ledger.core import tallies
from ledger.core.selectors import (
    claimable_now,
    held_due_operations,
    oldest_due_by_action,
    oldest_due_seconds,
    switch_over,
)
from ledger.models import Conflict, Control, DestinationHealth, Heartbeat, Operation, Workspace
from ledger.states import ATTENTION_STATES, CLAIMABLE_STATES, UNFINISHED_STATES
from opsconsole import requests_metrics
from reconciliation.models import Mismatch, MismatchKind, MismatchStatus

HEARTBEATS = ("sweep", "reconcile", "purge")


def metrics_view(request):
    expected = settings.OPSCONSOLE_METRICS_TOKEN
    if not expected:
        raise Http404("metrics are off: set OPSCONSOLE_METRICS_TOKEN")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), expected.encode()):
        response = HttpResponse(
            "A metrics token is required: Authorization: Bearer <OPSCONSOLE_METRICS_TOKEN>.\n",
            status=401,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LedgerCollector())
    registry.register(requests_metrics.collector())
    # One transaction for the scrape's reads: the index-order reads inside it need no BEGIN and
    # COMMIT of their own (ledger.core.selectors.read_in_index_order).
    with transaction.atomic():
        body = generate_latest(registry)
    return HttpResponse(body, content_type="text/plain; version=0.0.4; charset=utf-8")


class LedgerCollector:
    """Reads the ledger's signals at collect time (one scrape, one set of queries)."""

    def collect(self):
        now = timezone.now()
        switches = list(Control.objects.filter(paused=True))
        unfinished = list(
            Operation.objects.filter(state__in=UNFINISHED_STATES)
            .values("workspace_id", "action", "state")
            .annotate(n=Count("id"))
            .order_by("workspace_id", "action", "state")
        )
        conflicts = list(
            Conflict.objects.filter(status=Conflict.Status.OPEN)
            .values("operation__workspace_id", "operation__action")
            .annotate(n=Count("id"))
            .order_by("operation__workspace_id", "operation__action")
        )
        yield self._unfinished(unfinished)
        yield self._oldest_retryable(now, switches, unfinished)
        yield self._review_items(unfinished, conflicts)
        yield self._mismatches()
        yield from self._tallies()
        oldest = GaugeMetricFamily(
            "opsconsole_oldest_due_seconds", "Age of the oldest operation waiting to be claimed (paused work excluded)."
        )
        oldest.add_metric([], oldest_due_seconds(now, switches) or 0)
        yield oldest
        open_conflicts = GaugeMetricFamily("opsconsole_open_conflicts", "Conflicts waiting for review.")
        open_conflicts.add_metric([], sum(row["n"] for row in conflicts))
        yield open_conflicts
        yield self._breakers()
        beats = dict(Heartbeat.objects.values_list("name", "beat_at"))
        for job in HEARTBEATS:
            beat = beats.get(job)
            family = GaugeMetricFamily(
                f"opsconsole_{job}_heartbeat_age_seconds", f"Seconds since the {job} job last ran (-1: never)."
            )
            family.add_metric([], (now - beat).total_seconds() if beat else -1)
            yield family

    def _tallies(self):
        """The counters the workers keep (``ledger.core.tallies``), summed over their processes."""
        attempts = CounterMetricFamily(
            "opsconsole_attempts",
            "Attempts by action, destination and outcome.",
            labels=["action", "destination", "outcome"],
        )
        failures = CounterMetricFamily(
            "opsconsole_attempt_failures",
            "Attempts that did not succeed, by action, destination and category "
            "(transient, permanent, ambiguous, stale, abandoned).",
            labels=["action", "destination", "category"],
        )
        late = CounterMetricFamily(
            "opsconsole_late_operations",
            "Operations that reached a final state after their action's service level.",
            labels=["action"],
        )
        claims = CounterMetricFamily(
            "opsconsole_claims",
            "Claims by callers that perform their own actions (docs/claims.md), by action and answer "
            "(claimed, done, in_progress, retry_later, held, unknown ...).",
            labels=["action", "answer"],
        )
        expired = CounterMetricFamily(
            "opsconsole_leases_expired",
            "Claims whose lease expired before an outcome was recorded, by action.",
            labels=["action"],
        )
        finished: dict[str, dict] = {}
        for (name, labels), value in tallies.totals().items():
            values = json.loads(labels)
            if name == tallies.ATTEMPTS:
                attempts.add_metric([values["action"], values["destination"], values["outcome"]], value)
                if values["outcome"] != "ok":
                    failures.add_metric([values["action"], values["destination"], values["outcome"]], value)
            elif name == tallies.LATE:
                late.add_metric([values["action"]], value)
            elif name == tallies.CLAIMS:
                claims.add_metric([values["action"], values["answer"]], value)
            elif name == tallies.LEASES_EXPIRED:
                expired.add_metric([values["action"]], value)
            elif name in (tallies.FINISHED_BUCKET, tallies.FINISHED_SECONDS):
                action = finished.setdefault(values["action"], {"buckets": {}, "sum": 0.0})
                if name == tallies.FINISHED_SECONDS:
                    action["sum"] = value
                else:
                    action["buckets"][float(values["le"])] = value
        yield attempts
        yield failures
        yield late
        yield claims
        yield expired
        yield self._processing_time(finished)

    def _processing_time(self, finished: dict):
        family = HistogramMetricFamily(
            "opsconsole_processing_seconds",
            "Time from arrival to a final state, per action, in buckets around "
            "the action's service level (tenths to five times it).",
            labels=["action"],
        )
        for action, seen in sorted(finished.items()):
            running, cumulative = 0.0, []
            for bound in [*tallies.buckets(action), float("inf")]:
                running += seen["buckets"].get(bound, 0.0)
                cumulative.append(("+Inf" if bound == float("inf") else repr(bound), running))
            family.add_metric([action], cumulative, sum_value=seen["sum"])
        return family

    def _breakers(self):
        family = GaugeMetricFamily(
            "opsconsole_destination_breaker_open",
            "1 while a destination's circuit breaker pauses its calls (or one probe call is deciding), else 0.",
            labels=["destination"],
        )
        rows = DestinationHealth.objects.filter(name__startswith="destination:").values_list("name", "breaker_until")
        for name, breaker_until in rows.order_by("name"):
            family.add_metric([name.removeprefix("destination:")], 0 if breaker_until is None else 1)
        return family

    def _mismatches(self):
        family = GaugeMetricFamily(
            "opsconsole_reconciliation_mismatches",
            "Open findings of the reconciliation audit, by kind.",
            labels=["kind"],
        )
        found = dict(
            Mismatch.objects.filter(status=MismatchStatus.OPEN)
            .values_list("kind")
            .annotate(n=Count("id"))
            .order_by("kind")
        )
        for kind in MismatchKind.values:  # every kind, 0 too: an alert compares it with 0
            family.add_metric([kind], found.get(kind, 0))
        return family

    def _unfinished(self, rows):
        family = GaugeMetricFamily(
            "opsconsole_operations", "Unfinished operations by action and state.", labels=["action", "state"]
        )
        by_action_state: Counter = Counter()
        for row in rows:
            by_action_state[(row["action"], row["state"])] += row["n"]
        for labels, n in sorted(by_action_state.items()):
            family.add_metric(list(labels), n)
        return family

    def _oldest_retryable(self, now, switches, unfinished):
        family = GaugeMetricFamily(
            "opsconsole_oldest_retryable_age_seconds",
            "How long the oldest due operation (pending, or retrying past its time) has waited, per action; "
            "held=true: those a pause holds.",
            labels=["action", "held"],
        )
        # From the counts already read: the actions with claimable operations a pause holds, and
        # those with some that none holds. Only their ranges are read.
        actions = {"true": set(), "false": set()}
        for row in unfinished:
            if row["state"] in CLAIMABLE_STATES:
                paused = switch_over(switches, row["workspace_id"], row["action"]) is not None
                actions["true" if paused else "false"].add(row["action"])
        # Caller-performed actions count too: their due operations wait for their callers' claims.
        reads = (("false", claimable_now(now, switches)), ("true", held_due_operations(now, switches)))
        for is_held, operations in reads:
            for action, since in sorted(oldest_due_by_action(operations, sorted(actions[is_held])).items()):
                family.add_metric([action, is_held], max((now - since).total_seconds(), 0))
        return family

    def _review_items(self, unfinished, conflicts):
        family = GaugeMetricFamily(
            "opsconsole_review_items",
            f"What waits for a person, by workspace, action and reason ({', '.join(ATTENTION_STATES)}, conflict).",
            labels=["workspace", "action", "reason"],
        )
        slugs = dict(Workspace.objects.values_list("pk", "slug"))
        for row in unfinished:
            if row["state"] in ATTENTION_STATES:
                family.add_metric([slugs.get(row["workspace_id"], ""), row["action"], row["state"]], row["n"])
        for row in conflicts:
            family.add_metric(
                [slugs.get(row["operation__workspace_id"], ""), row["operation__action"], "conflict"], row["n"]
            )
        return family
