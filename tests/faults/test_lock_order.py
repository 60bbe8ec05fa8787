"""One lock order: latest_wins intake and a working cluster never deadlock.

9 clients each send increasing ``update-status`` versions of their own request to gunicorn, as
`make serve` runs it, while a qcluster performs them. Each newer version supersedes the older ones
that have not run, so intake updates rows the cluster's claims hold and may be finishing; before
one lock order (row locks, then the workspace's audit chain) PostgreSQL found deadlocks between
the two, and the web answered 503. Now: no deadlock in the database's own count
(``pg_stat_database.deadlocks``), no 503, and every request ends at its highest version.
Real processes on PostgreSQL; its connections stay bounded (one per gunicorn worker, the cluster's).
"""

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.db import connection

from ledger.models import Operation, RequestStatus
from ledger.states import State
from tests.faults.gunicorn import running_gunicorn
from tests.faults.qcluster import operation_states, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

CLIENTS = 9
VERSIONS = 60  # per client: 540 requests, as in the review that found the deadlock
# The clients stop sending after this long: a slow machine sends fewer requests, never fails for it.
DEADLINE_SECONDS = 25


def deadlocks() -> int:
    """PostgreSQL's count of deadlocks detected in this database (flushed by each backend as its
    transactions end, and at its exit: read after the servers stopped)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


def send_increasing_versions(url: str, token: str) -> dict[str, list]:
    """Each client sends versions 1, 2, ... of its own request, one after the other; returns each
    request's answers as (version, status, reason) in the order sent."""
    start = threading.Barrier(CLIENTS)
    deadline = time.monotonic() + DEADLINE_SECONDS

    def client(number: int) -> tuple[str, list]:
        request_id = f"LOCK-{number}"
        answers = []
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            start.wait(timeout=30)
            for version in range(1, VERSIONS + 1):
                if time.monotonic() > deadline:
                    break
                body = {
                    "action": "update-status",
                    "delivery_id": f"{request_id}-{version}",
                    "data": {
                        "request_id": request_id,
                        "version": version,
                        "status": "in_review" if version % 2 else "approved",
                    },
                }
                try:
                    response = http.post("/api/v1/events", json=body)
                    reason = response.json().get("status", "") if response.status_code >= 500 else ""
                    answers.append((version, response.status_code, reason))
                except httpx.TransportError as exc:
                    answers.append((version, f"{type(exc).__name__}: {exc}", ""))
        return request_id, answers

    with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        return dict(pool.map(client, range(CLIENTS)))


def test_latest_wins_intake_and_a_working_cluster_never_deadlock(workspace, token, start_cluster, tmp_path):
    cluster = start_cluster("lock-order")
    before = deadlocks()

    with running_gunicorn(tmp_path) as server:
        began = time.monotonic()
        answers = send_increasing_versions(server.url, token)
        took = time.monotonic() - began
        highest = {
            request_id: max((version for version, status, _ in sent if status in (200, 201)), default=0)
            for request_id, sent in answers.items()
        }
        # What intake accepted last of each request runs; the older versions were superseded or ran.
        wait_for(
            lambda: (
                RequestStatus.objects.filter(version__in=set(highest.values())).count() >= len(highest)
                and not Operation.objects.filter(state__in=(State.PENDING, State.PROCESSING)).exists()
            ),
            timeout=60,
            clusters=(cluster,),
            describe=lambda: f"states {operation_states()}",
            message="the cluster did not finish the highest versions",
        )
        log = server.log_tail()
    cluster.stop()
    after = deadlocks()

    statuses = Counter(
        (status, reason) if reason else status for sent in answers.values() for _, status, reason in sent
    )
    sent = sum(statuses.values())
    print(
        f"{sent} requests from {CLIENTS} clients in {took:.1f} s; answers {dict(statuses)}; "
        f"deadlocks in the database: {after - before}; states {operation_states()}"
    )
    assert sent >= CLIENTS * 10, f"only {sent} requests were sent before the deadline"
    assert set(statuses) <= {200, 201}, f"answers: {dict(statuses)}\n{log}"
    assert after - before == 0, f"{after - before} deadlocks while {sent} versions were sent"
    statuses_now = dict(RequestStatus.objects.values_list("request_id", "version"))
    assert statuses_now == highest, f"status rows {statuses_now}, highest versions accepted {highest}"
    assert set(operation_states()) <= {State.SUCCEEDED, State.SUPERSEDED}, operation_states()
