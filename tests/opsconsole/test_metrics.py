"""/metrics speaks Prometheus text and shows the ledger's liveness signals, to a scraper that
presents the metrics token; without a token configured it is off."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.engine.processing import process_due_operations
from ledger.models import DestinationHealth
from ledger.sweep import sweep
from tests.conftest import event, external_event

TOKEN = "scrape-me-0123456789"


@pytest.fixture(autouse=True)
def metrics_token(settings):
    settings.OPSCONSOLE_METRICS_TOKEN = TOKEN


def scrape(client):
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    return response.content.decode()


def test_it_counts_operations_by_state_and_shows_the_oldest_due_age(api, client):
    api.post("/api/v1/events", event("d-1"))
    api.post("/api/v1/events", event("d-2", version=4))
    api.post("/api/v1/events", event("d-3", title="changed"))

    body = scrape(client)

    assert 'opsconsole_operations{action="prepare-brief",state="pending"} 2.0' in body
    assert "opsconsole_open_conflicts 1.0" in body
    assert 'opsconsole_review_items{action="prepare-brief",reason="conflict",workspace="demo"} 1.0' in body
    assert "opsconsole_sweep_heartbeat_age_seconds -1.0" in body  # the sweep never ran
    oldest = next(line for line in body.splitlines() if line.startswith("opsconsole_oldest_due_seconds"))
    assert float(oldest.split()[1]) >= 0


def test_it_reports_the_sweep_heartbeat_once_the_sweep_ran(api, client):
    api.post("/api/v1/events", event("d-1"))
    process_due_operations()
    sweep()

    body = scrape(client)

    assert 'state="succeeded"' not in body  # finished work is not counted per scrape
    assert "opsconsole_oldest_due_seconds 0.0" in body
    heartbeat = next(line for line in body.splitlines() if line.startswith("opsconsole_sweep_heartbeat_age"))
    assert 0 <= float(heartbeat.split()[1]) < 60


@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer"])
def test_it_refuses_a_scrape_without_the_token(client, db, header):
    extra = {"HTTP_AUTHORIZATION": header} if header else {}

    response = client.get("/metrics", **extra)

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert "opsconsole_operations" not in response.content.decode()


def test_it_is_off_without_a_token_configured(client, db, settings):
    settings.OPSCONSOLE_METRICS_TOKEN = ""

    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 404


def value(body: str, prefix: str) -> float:
    return float(next(line for line in body.splitlines() if line.startswith(prefix)).split()[-1])


def test_paused_work_shows_as_held_age_not_as_zero(api, client, workspace, time_machine):
    from datetime import timedelta

    from django.utils import timezone

    from ledger.people import pause

    start = timezone.now()
    time_machine.move_to(start, tick=False)
    api.post("/api/v1/events", event("d-1"))
    pause.set_paused(paused=True, reason="incident", workspace=workspace, actor="test")
    time_machine.move_to(start + timedelta(minutes=3), tick=False)

    body = scrape(client)

    assert value(body, 'opsconsole_oldest_retryable_age_seconds{action="prepare-brief",held="true"}') == 180.0
    assert 'held="false"' not in body
    assert value(body, "opsconsole_oldest_due_seconds") == 0.0


def test_items_waiting_for_a_person_are_counted_by_reason(api, client, workspace):
    from ledger.models import Operation

    api.post("/api/v1/events", event("d-1"))
    api.post("/api/v1/events", event("d-2", version=4))
    Operation.objects.filter(key__contains=":v4:").update(state="needs_review")
    api.post(
        "/api/v1/events",
        {
            "action": "issue-refund",
            "data": {"request_id": "F-1", "version": 1, "customer_id": "C-9", "amount_cents": 100, "currency": "EUR"},
        },
    )

    body = scrape(client)

    assert value(body, 'opsconsole_review_items{action="prepare-brief",reason="needs_review",workspace="demo"}') == 1
    assert value(body, 'opsconsole_review_items{action="issue-refund",reason="pending_approval",workspace="demo"}') == 1


def test_promtool_accepts_a_live_scrape(api, client):
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("needs promtool (Debian's prometheus package; .ci/run installs it)")
    api.post("/api/v1/events", event("d-1"))
    api.post("/api/v1/events", event("d-2", title="changed"))
    api.post("/api/v1/events", event("d-3", version=4))
    process_due_operations()  # counters and a histogram too

    checked = subprocess.run([promtool, "check", "metrics"], input=scrape(client), capture_output=True, text=True)

    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_failure_raises_the_failure_counter_by_action_destination_and_category(api, client, standin):
    from ledger.actions import get_action

    ticket = {"action": "file-ticket", "data": {"summary": "printer", "owner": "ops", "version": 1}}
    standin.fail_next({"kind": "status", "status": 400})
    api.post("/api/v1/events", ticket | {"data": ticket["data"] | {"request_id": "T-1"}})
    api.post("/api/v1/events", ticket | {"data": ticket["data"] | {"request_id": "T-2"}})
    process_due_operations()

    body = scrape(client)

    where = get_action("file-ticket").destination_name()
    assert (
        value(
            body,
            f'opsconsole_attempt_failures_total{{action="file-ticket",category="permanent",destination="{where}"}}',
        )
        == 1
    )
    assert value(body, f'opsconsole_attempts_total{{action="file-ticket",destination="{where}",outcome="ok"}}') == 1


def test_a_late_operation_counts_as_late_and_lands_in_the_top_buckets(api, client, time_machine):
    from datetime import timedelta

    from django.utils import timezone

    start = timezone.now()
    time_machine.move_to(start, tick=False)
    api.post("/api/v1/events", event("d-1"))
    api.post("/api/v1/events", event("d-2", version=4))
    time_machine.move_to(start + timedelta(minutes=1), tick=False)
    process_due_operations()  # both in 60 s: on time (prepare-brief: 5 minutes)
    api.post("/api/v1/events", event("d-3", version=5))
    time_machine.move_to(start + timedelta(minutes=8), tick=False)
    process_due_operations()  # 7 minutes: late

    body = scrape(client)

    assert value(body, 'opsconsole_late_operations_total{action="prepare-brief"}') == 1
    assert value(body, 'opsconsole_processing_seconds_bucket{action="prepare-brief",le="75.0"}') == 2
    assert value(body, 'opsconsole_processing_seconds_bucket{action="prepare-brief",le="300.0"}') == 2
    assert value(body, 'opsconsole_processing_seconds_bucket{action="prepare-brief",le="450.0"}') == 3
    assert value(body, 'opsconsole_processing_seconds_count{action="prepare-brief"}') == 3
    assert value(body, 'opsconsole_processing_seconds_sum{action="prepare-brief"}') == 60 + 60 + 420


def test_counters_are_kept_per_process_and_summed(client, workspace):
    from ledger.models import Tally

    Tally.objects.create(name="late", labels='{"action": "prepare-brief"}', shard="host-a:1", value=2)
    Tally.objects.create(name="late", labels='{"action": "prepare-brief"}', shard="host-b:7", value=3)

    assert value(scrape(client), 'opsconsole_late_operations_total{action="prepare-brief"}') == 5


def test_a_planted_destination_record_raises_unknown_to_ledger(client, workspace, standin, time_machine):
    from datetime import timedelta

    from django.utils import timezone

    from reconciliation.two_way_audit import run_audit

    assert value(scrape(client), 'opsconsole_reconciliation_mismatches{kind="unknown_to_ledger"}') == 0
    standin.create("demo:R-9:v1:send-notice", {"summary": "Not sent by us", "owner": "ops"})
    time_machine.move_to(timezone.now() + timedelta(minutes=5), tick=False)  # past the settle time

    assert run_audit().unknown_to_ledger == 1

    body = scrape(client)
    assert value(body, 'opsconsole_reconciliation_mismatches{kind="unknown_to_ledger"}') == 1
    assert value(body, 'opsconsole_reconciliation_mismatches{kind="missing_at_destination"}') == 0


def test_a_process_writes_to_its_own_shard_taken_when_it_writes(db, monkeypatch):
    """django-q2 forks its workers after Django is set up: the shard is read at each write, and a
    host never has more than tallies.SHARDS of them however many workers come and go."""
    import os

    from ledger.core import tallies
    from ledger.models import Tally

    for pid in (3, 3 + tallies.SHARDS, 4):
        monkeypatch.setattr(os, "getpid", lambda pid=pid: pid)
        tallies._add(__import__("collections").Counter({("late", '{"action": "x"}'): 1}))

    shards = dict(Tally.objects.values_list("shard", "value"))
    assert sorted(shard.rsplit(":", 1)[1] for shard in shards) == ["3", "4"]
    assert sorted(shards.values()) == [1, 2]


def test_the_oldest_retryable_age_is_the_earliest_arrival_or_retry_time_per_action(api, client, standin, time_machine):
    """Per action, the operation that has waited longest is not always the first to arrive: a
    retry puts one off, and one that arrived after it may be due from an earlier time."""
    from datetime import timedelta

    from django.db.models import Min
    from django.db.models.functions import Coalesce
    from django.utils import timezone

    from ledger.core.selectors import due_operations
    from ledger.models import Operation

    start = timezone.now()
    time_machine.move_to(start, tick=False)
    standin.fail_next({"kind": "status", "status": 503}, {"kind": "status", "status": 503})
    api.post("/api/v1/events", external_event("file-ticket", "t-1", request_id="T-1"))
    api.post("/api/v1/events", external_event("send-notice", "n-1", request_id="N-1"))
    process_due_operations()  # both refused: retrying, each put off to its next attempt
    ticket, notice = (Operation.objects.get(payload__request_id=name) for name in ("T-1", "N-1"))
    assert ticket.state == notice.state == "retrying"
    between = start + (ticket.next_attempt_at - start) / 2
    time_machine.move_to(between, tick=False)
    api.post("/api/v1/events", external_event("file-ticket", "t-2", request_id="T-2"))  # before T-1's retry is due
    now = max(ticket.next_attempt_at, notice.next_attempt_at) + timedelta(minutes=1)
    time_machine.move_to(now, tick=False)

    body = scrape(client)

    assert (
        value(body, 'opsconsole_oldest_retryable_age_seconds{action="file-ticket",held="false"}')
        == (now - between).total_seconds()
    )
    assert (
        value(body, 'opsconsole_oldest_retryable_age_seconds{action="send-notice",held="false"}')
        == (now - notice.next_attempt_at).total_seconds()
    )
    # The same as the minimum over every due operation, the way this gauge was read before.
    oldest = due_operations(now).values_list("action").annotate(since=Min(Coalesce("next_attempt_at", "created_at")))
    for action, since in oldest.order_by():
        assert (
            value(body, f'opsconsole_oldest_retryable_age_seconds{{action="{action}",held="false"}}')
            == (now - since).total_seconds()
        )


def test_a_retry_not_yet_due_is_not_waiting(api, client, standin, time_machine):
    from django.utils import timezone

    time_machine.move_to(timezone.now(), tick=False)
    standin.fail_next({"kind": "status", "status": 503})
    api.post("/api/v1/events", external_event("send-notice"))
    process_due_operations()

    body = scrape(client)

    assert 'opsconsole_operations{action="send-notice",state="retrying"} 1.0' in body
    assert "opsconsole_oldest_retryable_age_seconds{" not in body


def test_a_scrape_makes_the_same_queries_however_many_operations_wait(api, client, workspace):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from ledger.people import pause

    pause.set_paused(paused=True, reason="incident", workspace=workspace, action="send-notice", actor="test")

    def queries_of_a_scrape() -> int:
        with CaptureQueriesContext(connection) as captured:
            scrape(client)
        return len(captured.captured_queries)

    api.post("/api/v1/events", event("d-1"))
    few = queries_of_a_scrape()
    for n in range(2, 30):
        api.post("/api/v1/events", event(f"d-{n}", request_id=f"R-{n}"))
    assert queries_of_a_scrape() == few


def test_a_destination_whose_breaker_is_open_shows_as_one(client, db):
    DestinationHealth.objects.create(
        name="destination:helpdesk", failures_in_row=3, breaker_until=timezone.now() + timedelta(seconds=30)
    )
    DestinationHealth.objects.create(name="destination:crm", last_ok_at=timezone.now())
    DestinationHealth.objects.create(name="action:prepare-brief", last_ok_at=timezone.now())

    body = scrape(client)

    assert 'opsconsole_destination_breaker_open{destination="helpdesk"} 1.0' in body
    assert 'opsconsole_destination_breaker_open{destination="crm"} 0.0' in body
    assert "prepare-brief" not in body.split("opsconsole_destination_breaker_open")[-1].split("# HELP")[0]
