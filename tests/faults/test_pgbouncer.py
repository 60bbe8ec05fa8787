"""Behind a transaction pooler: the intake race and a drain through a real
PgBouncer in transaction mode, with ``DATABASE_POOL_MODE=transaction`` as docs/operations.md says
to run it there. Before it, the prepared token lookup met server connections that had never seen
its statement (``prepared statement "_pg3_0" does not exist``) and a third of the API answered 500.

A destination's cap on calls in flight holds through it too: its slots were session advisory
locks, which stayed with whichever server session took them, and two clusters made 3 to 4 calls
at once to a destination capped at one.

Real processes on PostgreSQL: PgBouncer (tests/faults/pgbouncer.py, a pool of fewer server
connections than it has clients), gunicorn as ``make serve`` runs it and qclusters, all given the
pooler's address as DATABASE_URL.
"""

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from ledger.models import Delivery, Operation
from ledger.states import State
from tests import third_party
from tests.conftest import event
from tests.faults.gunicorn import running_gunicorn
from tests.faults.pgbouncer import BINARY, running_pgbouncer
from tests.faults.qcluster import assert_each_performed_exactly_once, operation_states, submit_prepare_briefs, wait_for
from tests.faults.test_configured_limits_cluster import all_in, created_once_each, most_in_flight, posts, tickets

if BINARY is None:
    pytest.skip(
        "the pgbouncer binary is not installed (`apt-get install pgbouncer`, as .ci/run does)", allow_module_level=True
    )

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

POOLED = {"DATABASE_POOL_MODE": "transaction"}
RACERS = 32  # deliveries of one event, released together
EVENTS = 40  # different events, sent at the same moment
DRAINED = 60


@pytest.fixture
def pooler(transactional_db, tmp_path):
    with running_pgbouncer(tmp_path) as running:
        yield running


@pytest.fixture
def server(pooler, tmp_path):
    env = {"DATABASE_URL": pooler.url, "WEB_CONCURRENCY": "4", **POOLED}
    with running_gunicorn(tmp_path, env=env) as running:
        yield running


def post_together(url: str, token: str, bodies: list[dict]) -> list[int]:
    """POST each body from its own client, all released at once; the answers' statuses."""
    barrier = threading.Barrier(len(bodies), timeout=30)

    def post(body: dict) -> int:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            barrier.wait()
            return http.post("/api/v1/events", json=body).status_code

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(post, bodies))


def test_the_intake_race_answers_no_server_error_through_the_pooler(server, token):
    one_key = [event(f"race-{n}") for n in range(RACERS)]
    different = [event(f"other-{n}", request_id=f"P-{n}") for n in range(EVENTS)]

    answers = post_together(server.url, token, one_key + different)

    server_errors = sum(status >= 500 for status in answers)
    assert server_errors == 0, f"{server_errors} server errors of {len(answers)}\n{server.log_tail(5)}"
    assert Counter(answers[:RACERS]) == {201: 1, 200: RACERS - 1}
    assert Counter(answers[RACERS:]) == {201: EVENTS}
    assert Operation.objects.filter(key="demo:R-42:v3:prepare-brief").count() == 1
    assert Operation.objects.count() == 1 + EVENTS
    assert Delivery.objects.count() == RACERS + EVENTS


def test_a_cluster_drains_through_the_pooler(workspace, pooler, start_cluster):
    operation_ids = submit_prepare_briefs(workspace, DRAINED)

    cluster = start_cluster("pooled", db_url=pooler.url, env=POOLED)
    wait_for(
        lambda: operation_states(operation_ids) == {"succeeded": DRAINED},
        timeout=30,
        clusters=(cluster,),
        describe=lambda: f"{operation_states(operation_ids)}\n{pooler.log_tail()}",
        message="the cluster did not drain through the pooler",
    )
    assert_each_performed_exactly_once(operation_ids)


CAP = 1
# Claims of two: the four workers of two clusters each want the one slot at once.
SMALL_CLAIMS = {"OPSCONSOLE_CLAIM_BATCH": "2"}
TICKETS = 16


@third_party.needs_node
def test_the_cap_on_calls_in_flight_holds_across_clusters_through_the_pooler(
    workspace, pooler, tmp_path, configured, start_cluster
):
    """The cap's slots outlive a transaction (a call is made outside any): behind the pooler they
    are not PostgreSQL's session locks, which would stay with whichever server session took them."""
    with third_party.running_json_server(tmp_path, delay_ms=200) as slow:
        configured(json_server=slow, max_concurrency=CAP)
        options = {"db_url": pooler.url, "env": POOLED | SMALL_CLAIMS, "wait": False}
        clusters = start_cluster("a", **options), start_cluster("b", **options)
        for cluster in clusters:
            cluster.wait_running()
        ids = tickets(workspace, TICKETS)
        all_in(ids, State.SUCCEEDED, clusters, timeout=60, message="the tickets were not all created")

        calls = posts(slow)
        assert len(calls) == TICKETS
        assert most_in_flight(calls) == CAP
        created_once_each(slow, ids)
