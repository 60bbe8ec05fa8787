"""A destination's limits hold for a real worker cluster calling a third-party server:
json-server behind the configured `create-ticket` action (tests/configured.py), measured at the
server from its request log (tests/third_party.py), never from our own records:

- its rate limit paces a bulk replay of a failure group of 200 operations, on every worker;
- its cap on calls in flight holds across two clusters of two workers each;
- its circuit breaker opens after transient failures in a row, holds the rest untried, lets one
  probe through after the cool-down and closes on its answer: one ticket each, none twice.

The scripted destination tests the same rules unit by unit (tests/ledger/engine/test_destination_limits.py).
"""

from collections import Counter

import pytest

from ledger.intake import submit
from ledger.models import AuditEvent, BulkAction, Operation
from ledger.reads.failure_groups import failure_groups
from ledger.states import State
from tests import third_party
from tests.faults.qcluster import operation_states, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True), third_party.needs_node]


def tickets(workspace, count: int, prefix: str = "T") -> list[int]:
    events = [
        {
            "action": "create-ticket",
            "delivery_id": f"{prefix}-{n}",
            "data": {"request_id": f"{prefix}-{n}", "title": f"Ticket {n}", "priority": "normal"},
        }
        for n in range(count)
    ]
    results = submit.submit_batch(workspace=workspace, raw_events=events, source="cli")
    assert {result.outcome for result in results} == {"accepted"}
    return [result.operation.pk for result in results]


def all_in(ids: list[int], state: State, clusters, *, timeout: float, message: str) -> None:
    wait_for(
        lambda: operation_states(ids) == {state: len(ids)},
        timeout=timeout,
        clusters=clusters,
        message=message,
        describe=lambda: str(operation_states(ids)),
    )


def posts(server) -> list[dict]:
    return [line for line in server.requests() if line["method"] == "POST"]


def most_begun_within_a_second(calls: list[dict]) -> int:
    """The most calls whose start lies in any one-second window (the server's clock, in ms)."""
    starts = sorted(call["started"] for call in calls)
    most, first = 0, 0
    for last, start in enumerate(starts):
        while start - starts[first] >= 1000:
            first += 1
        most = max(most, last - first + 1)
    return most


def most_in_flight(calls: list[dict]) -> int:
    """The most calls the server was answering at one moment (an end before a start at the same ms)."""
    moments = sorted([(call["started"], 1) for call in calls] + [(call["finished"], -1) for call in calls])
    most = now = 0
    for _, change in sorted(moments, key=lambda moment: (moment[0], moment[1])):
        now += change
        most = max(most, now)
    return most


def created_once_each(server, ids: list[int]) -> None:
    """json-server holds exactly one ticket per operation, carrying its key."""
    keys = Counter(ticket["source_key"] for ticket in server.db()["tickets"])
    expected = set(Operation.objects.filter(pk__in=ids).values_list("key", flat=True))
    assert set(keys) == expected, keys.most_common(3)
    assert set(keys.values()) == {1}, keys.most_common(3)


RATE = 40
REPLAYED = 200


def test_a_bulk_replay_of_200_is_paced_at_the_destinations_rate(
    workspace, json_server, configured, start_cluster, client, reviewer
):
    configured(json_server=json_server, rate_limit=RATE, max_concurrency=4)
    json_server.fail_next("POST /tickets", "status", status=400, times=REPLAYED)
    cluster = start_cluster("worker")
    ids = tickets(workspace, REPLAYED)
    all_in(ids, State.NEEDS_REVIEW, (cluster,), timeout=60, message="the refused tickets did not all need review")
    refused = posts(json_server)
    [group], _ = failure_groups(Operation.objects.all())
    assert group.count == REPLAYED

    client.force_login(reviewer)
    form = {"group": str(group.criterion), "token": "one-press", "kind": "replay", "reason": "the 400 is fixed"}
    assert client.post("/console/bulk/", form).status_code == 302
    all_in(ids, State.SUCCEEDED, (cluster,), timeout=60, message="the replayed tickets were not all created")

    assert BulkAction.objects.values_list("done", "skipped", "failed").get() == (REPLAYED, 0, 0)
    replayed = posts(json_server)[len(refused) :]
    for calls in (refused, replayed):
        assert len(calls) == REPLAYED
        span = (max(call["started"] for call in calls) - min(call["started"] for call in calls)) / 1000
        # 200 calls at 40 a second begin over at least 199/40 s; a burst would take a fraction of it.
        assert span >= 0.95 * (REPLAYED - 1) / RATE, span
        # Slots are 1/RATE apart; the server sees each start after its slot plus a scheduling delay
        # that varies (2 cores, a worker and json-server sharing them). Allowing 100 ms of that
        # jitter, one second holds at most 1.1 s of slots; an unpaced replay puts several times that
        # into a second.
        assert most_begun_within_a_second(calls) <= int(1.1 * RATE) + 1
    created_once_each(json_server, ids)


CAP = 2


def test_the_cap_on_calls_in_flight_holds_across_clusters(workspace, tmp_path, configured, start_cluster):
    with third_party.running_json_server(tmp_path, delay_ms=300) as slow:
        configured(json_server=slow, max_concurrency=CAP)
        clusters = start_cluster("a", wait=False), start_cluster("b", wait=False)
        for cluster in clusters:
            cluster.wait_running()
        ids = tickets(workspace, 30)
        all_in(ids, State.SUCCEEDED, clusters, timeout=60, message="the tickets were not all created")

        calls = posts(slow)
        assert len(calls) == 30
        # Two clusters of two workers would have up to 8 calls in flight without the shared slots.
        assert most_in_flight(calls) == CAP
        created_once_each(slow, ids)


COOLDOWN = 4


def test_the_breaker_opens_holds_probes_once_and_closes(workspace, json_server, configured, start_cluster):
    configured(json_server=json_server, breaker_threshold=3, breaker_cooldown=COOLDOWN, max_concurrency=1)
    json_server.fail_next("POST /tickets", "status", status=503, times=3)
    cluster = start_cluster("worker")
    ids = tickets(workspace, 12)
    all_in(ids, State.SUCCEEDED, (cluster,), timeout=60, message="the tickets were not all created")

    calls = posts(json_server)
    statuses = [call["status"] for call in calls]
    assert statuses[:3] == [503, 503, 503], statuses
    assert set(statuses[3:]) == {201}, statuses
    opened_at = calls[2]["finished"]
    probe, after = calls[3], calls[4:]
    # Nothing is called while open; then the one probe, alone, before anything else.
    assert probe["started"] - opened_at >= COOLDOWN * 1000 * 0.95, probe["started"] - opened_at
    assert all(call["started"] >= probe["finished"] for call in after)
    assert len(calls) == 12 + 3
    created_once_each(json_server, ids)
    kinds = list(AuditEvent.objects.filter(kind__startswith="breaker_").order_by("id").values_list("kind", flat=True))
    assert kinds == ["breaker_opened", "breaker_closed"]
    held = AuditEvent.objects.filter(kind="held", operation_id__in=ids).values_list("operation_id", flat=True)
    assert held  # claimed while open and given back untried
    assert not Operation.objects.filter(pk__in=ids, attempts__gt=2).exists()
