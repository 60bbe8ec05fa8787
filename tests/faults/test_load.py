"""64 clients at once against gunicorn, as `make serve` runs it, with a qcluster at work.

Real processes on PostgreSQL. Every event, sent by two clients at once and some once more, is
answered on purpose (accepted exactly once, 201; a duplicate, 200, at every other arrival), never
with a server error; and the database connections stay within what the processes can hold, whatever
the number of clients: one per gunicorn worker, one per cluster process, and this test's own two
(its main connection and the sampler's), sampled every 50 ms throughout.
"""

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.db import connection

from ledger.models import Delivery, Operation
from ledger.states import State
from tests.faults.gunicorn import configured_workers, running_gunicorn
from tests.faults.qcluster import DEFAULT_ENV, operation_states, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

CLIENTS = 64
EVENTS_PER_CLIENT = 8
# The clients stop sending after this long (they need about 10 s on 2 cores): a slow machine sends
# fewer requests rather than failing, and every answer is still checked.
DEADLINE_SECONDS = 40
# A cluster's processes that hold a connection: sentinel (with the scheduler), pusher, monitor, workers.
CLUSTER_CONNECTIONS = 3 + int(DEFAULT_ENV["Q_WORKERS"])
TEST_CONNECTIONS = 2


class ConnectionSampler(threading.Thread):
    """Counts the client sessions of this test's database every 50 ms, from a connection of its own."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples: list[int] = []
        self.busiest: list[tuple] = []
        self.done = threading.Event()

    def run(self):
        try:
            while not self.done.wait(0.05):
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT pid, state, left(query, 60) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND backend_type = 'client backend'"
                    )
                    sessions = cursor.fetchall()
                self.samples.append(len(sessions))
                if len(sessions) >= len(self.busiest):
                    self.busiest = sessions
        finally:
            connection.close()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.join(timeout=10)


def submit_from_clients(url: str, token: str) -> list[tuple[str, int | str]]:
    """Clients work in pairs, all starting together: both clients of a pair send the same events in
    the same order, so every event arrives twice at about the same time (as when an automation
    retries while its first try is still in flight); then each sends its pair's first event once
    more. Each client is a thread with its own httpx connection. Returns (request id, the answer's
    status or the transport error) for every request sent."""
    start = threading.Barrier(CLIENTS)
    deadline = time.monotonic() + DEADLINE_SECONDS

    def client(number: int) -> list[tuple[str, int | str]]:
        pair = number // 2
        events = [
            {
                "action": "prepare-brief",
                "delivery_id": f"c{number}-{n}",
                "data": {"request_id": f"L-{pair}-{n}", "version": 1, "title": "Load", "owner": "ops"},
            }
            for n in range(EVENTS_PER_CLIENT)
        ]
        answers = []
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            start.wait(timeout=30)
            for body in [*events, events[0]]:
                if time.monotonic() > deadline:
                    break
                try:
                    status = http.post("/api/v1/events", json=body).status_code
                except httpx.TransportError as exc:
                    status = f"{type(exc).__name__}: {exc}"
                answers.append((body["data"]["request_id"], status))
        return answers

    with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        return [answer for answers in pool.map(client, range(CLIENTS)) for answer in answers]


def test_64_clients_get_answers_and_the_connections_stay_bounded(workspace, token, start_cluster, tmp_path):
    cluster = start_cluster("load")
    bound = configured_workers() + CLUSTER_CONNECTIONS + TEST_CONNECTIONS

    with running_gunicorn(tmp_path) as server, ConnectionSampler() as sampler:
        began = time.monotonic()
        answers = submit_from_clients(server.url, token)
        took = time.monotonic() - began
        accepted = len({request_id for request_id, _ in answers})
        # The cluster performs what was accepted while the connections are still being counted.
        wait_for(
            lambda: Operation.objects.filter(state=State.SUCCEEDED).count() == accepted,
            timeout=60,
            clusters=(cluster,),
            describe=lambda: f"states {operation_states()}",
            message=f"the cluster did not perform the {accepted} accepted operations",
        )

    print(
        f"{len(answers)} requests from {CLIENTS} clients in {took:.1f} s ({len(answers) / took:.0f}/s); "
        f"database connections: at most {max(sampler.samples)} (bound {bound}), {len(sampler.samples)} samples"
    )
    assert len(answers) >= CLIENTS, f"only {len(answers)} requests were sent before the deadline"
    statuses = Counter(status for _, status in answers)
    assert set(statuses) <= {200, 201}, f"answers: {statuses}\n{server.log_tail()}"
    # Whatever the interleaving, each event was accepted exactly once and every other arrival of it
    # was answered as a duplicate.
    by_event: dict[str, list[int]] = {}
    for request_id, status in answers:
        by_event.setdefault(request_id, []).append(status)
    wrong = {request_id: got for request_id, got in by_event.items() if sorted(got) != [200] * (len(got) - 1) + [201]}
    assert not wrong, f"events not accepted exactly once: {wrong}"
    assert Operation.objects.count() == accepted
    assert Delivery.objects.count() == len(answers)
    assert sampler.samples, "the sampler took no sample"
    assert max(sampler.samples) <= bound, (
        f"{max(sampler.samples)} connections, more than {bound}; at the busiest: {sampler.busiest}"
    )
