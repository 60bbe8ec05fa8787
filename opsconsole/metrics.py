"""Prometheus text metrics: counts by state, the age of the oldest due operation, and the sweep's
and reconciliation's heartbeats (the ledger's own liveness signal: a wedged cluster shows as a
stale heartbeat).

Served only to a scraper that presents ``OPSCONSOLE_METRICS_TOKEN`` as a bearer token (Prometheus'
``authorization: {credentials: ...}``); without that setting ``/metrics`` is off (404).
"""

import hmac

from django.conf import settings
from django.db.models import Count
from django.http import Http404, HttpResponse
from django.utils import timezone

from ledger.models import Conflict, Heartbeat, Operation
from ledger.selectors import oldest_due_seconds


def metrics_view(request):
    expected = settings.OPSCONSOLE_METRICS_TOKEN
    if not expected:
        raise Http404("metrics are off: set OPSCONSOLE_METRICS_TOKEN")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), expected.encode()):
        response = HttpResponse("A metrics token is required: Authorization: Bearer <OPSCONSOLE_METRICS_TOKEN>.\n",
                                status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    now = timezone.now()
    lines = [
        "# HELP opsconsole_operations Operations by action and state.",
        "# TYPE opsconsole_operations gauge",
    ]
    by_state = Operation.objects.values("action", "state").annotate(n=Count("id")).order_by("action", "state")
    for row in by_state:
        lines.append(f'opsconsole_operations{{action="{row["action"]}",state="{row["state"]}"}} {row["n"]}')
    oldest = oldest_due_seconds(now)
    lines += [
        "# HELP opsconsole_oldest_due_seconds Age of the oldest operation waiting to be claimed.",
        "# TYPE opsconsole_oldest_due_seconds gauge",
        f"opsconsole_oldest_due_seconds {oldest or 0:.3f}",
        "# HELP opsconsole_open_conflicts Conflicts waiting for review.",
        "# TYPE opsconsole_open_conflicts gauge",
        f"opsconsole_open_conflicts {Conflict.objects.filter(status=Conflict.Status.OPEN).count()}",
    ]
    beats = dict(Heartbeat.objects.values_list("name", "beat_at"))
    for job in ("sweep", "reconcile"):
        beat = beats.get(job)
        lines += [
            f"# HELP opsconsole_{job}_heartbeat_age_seconds Seconds since the {job} job last ran (-1: never).",
            f"# TYPE opsconsole_{job}_heartbeat_age_seconds gauge",
            f"opsconsole_{job}_heartbeat_age_seconds {(now - beat).total_seconds() if beat else -1:.3f}",
        ]
    return HttpResponse("\n".join(lines) + "\n", content_type="text/plain; version=0.0.4")
