"""What the console says of a destination's limits: the dashboard lists the configured
destinations with their limits in words and their circuit breakers, and an operation waiting for a
paused destination says so, and until when. The breaker is opened the real way: json-server answers
503 to a configured action (tests/configured.py), the engine counts the failures."""

import re
from datetime import timedelta

from django.utils import timezone

from ledger.actions import get_action
from ledger.engine import limits
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.integrations import destination_status
from ledger.models import DestinationHealth, Operation
from tests import third_party

pytestmark = third_party.needs_node

DASHBOARD = "/console/dashboard/"


def ticket(workspace, request_id: str) -> Operation:
    data = {"request_id": request_id, "title": "Printer on fire", "priority": "high"}
    result = submit_event(workspace=workspace, source="api", raw={"action": "create-ticket", "data": data})
    assert result.outcome == "accepted", result
    return result.operation


def opened_breaker(workspace, json_server, configured) -> tuple[Operation, Operation]:
    """Two failures in a row open helpdesk's breaker (threshold 2, 60 s); a third ticket claimed
    meanwhile is given back untried. Returns (a failed one, the held one)."""
    configured(json_server=json_server, breaker_threshold=2, breaker_cooldown=60)
    json_server.fail_next("POST /tickets", "status", status=503, times=2)
    failed = [ticket(workspace, f"T-{n}") for n in range(2)]
    process_due_operations(worker="w1")
    held = ticket(workspace, "T-held")
    process_due_operations(worker="w1")
    held.refresh_from_db()
    assert held.state == "retrying"
    assert not held.attempt_rows.exists()
    return failed[0], held


def page_text(client, url: str) -> str:
    answer = client.get(url)
    assert answer.status_code == 200
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", answer.content.decode()))


def test_an_operation_held_by_an_open_breaker_says_until_when(client, login, workspace, json_server, configured):
    _, held = opened_breaker(workspace, json_server, configured)
    login("viewer")
    until = DestinationHealth.objects.get(name="destination:helpdesk").breaker_until

    text = page_text(client, f"/console/operations/{held.pk}/")

    assert (
        f"Waiting: calls to helpdesk paused until {timezone.localtime(until):%Y-%m-%d %H:%M:%S} UTC "
        "after 2 transient failures in a row (circuit breaker)"
    ) in text


def test_the_operation_that_failed_waits_for_the_same_pause(client, login, workspace, json_server, configured):
    failed, _ = opened_breaker(workspace, json_server, configured)
    login("viewer")

    assert "Waiting: calls to helpdesk paused until" in page_text(client, f"/console/operations/{failed.pk}/")


def test_while_a_probe_is_in_flight_the_operation_says_the_probe_decides(
    client, login, workspace, json_server, configured, time_machine
):
    _, held = opened_breaker(workspace, json_server, configured)
    time_machine.move_to(timezone.now() + timedelta(seconds=61))
    gate = limits.Gate(get_action("create-ticket"), actor="w2")
    assert gate.admission() is None
    assert gate.probing  # another worker took the probe
    login("viewer")

    text = page_text(client, f"/console/operations/{held.pk}/")

    assert "Waiting: a probe call to helpdesk decides whether calls resume" in text


def test_once_the_destination_answers_nothing_waits(client, login, workspace, json_server, configured, time_machine):
    _, held = opened_breaker(workspace, json_server, configured)
    time_machine.move_to(timezone.now() + timedelta(seconds=61))
    Operation.objects.filter(pk=held.pk).update(next_attempt_at=timezone.now())

    process_due_operations(worker="w1")  # the probe: json-server answers this time

    held.refresh_from_db()
    assert held.state == "succeeded"
    assert destination_status.destinations()[0].breaker == "closed"
    login("viewer")
    assert "Waiting:" not in page_text(client, f"/console/operations/{held.pk}/")


def test_an_operation_of_a_destination_without_a_breaker_never_waits_for_one(workspace, json_server, configured):
    configured(json_server=json_server)  # no breaker_threshold
    json_server.fail_next("POST /tickets", "status", status=503, times=3)
    operation = ticket(workspace, "T-1")
    process_due_operations(worker="w1")
    operation.refresh_from_db()

    assert operation.state == "retrying"
    assert destination_status.waiting_for(operation) is None


def test_the_dashboard_lists_each_destination_its_limits_and_its_breaker(
    client, login, workspace, json_server, configured
):
    opened_breaker(workspace, json_server, configured)
    login("viewer")

    answer = client.get(DASHBOARD)

    row = re.search(r'<tr id="destination-helpdesk"[^>]*>(.*?)</tr>', answer.content.decode(), re.S)
    assert row is not None
    assert 'class="warn"' in row.group(0)
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row.group(1)))
    assert "open calls paused until" in text
    assert " 2 " in text  # failures in a row
    assert "at most 4 in flight; after 2 failures in a row, calls pause for 60 s, then one probe call" in text, text
    assert "create-ticket" in text


def test_the_dashboard_lists_the_coded_destination_under_its_one_name_when_none_is_configured(client, login):
    login("viewer")

    standin, receivers = destination_status.destinations()
    assert (receivers.slug, receivers.actions) == ("subscribers' receivers", ["notify-subscriber"])
    assert standin.slug == "stand-in"
    assert standin.actions == ["file-ticket", "issue-refund", "send-notice", "send-welcome"]
    text = page_text(client, DASHBOARD)
    assert standin.limits == ["at most 50 calls at once", "no circuit breaker"]
    assert "stand-in closed 0 at most 50 calls at once; no circuit breaker file-ticket, issue-refund" in text
    assert "http://" not in text


def test_limits_in_words_name_the_rate_when_there_is_one(workspace, json_server, configured):
    configured(json_server=json_server, rate_limit=2.5, max_concurrency=1)

    [helpdesk] = [d for d in destination_status.destinations() if d.slug == "helpdesk"]

    assert helpdesk.limits == ["at most 2.5 calls a second", "at most 1 in flight", "no circuit breaker"]
    assert helpdesk.breaker == "closed"
    assert helpdesk.paused_until is None
