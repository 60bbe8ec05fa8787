"""A configured action's service level (``service_level_seconds``; the demo's `send-invoice`
promises 30 minutes) counts as a coded action's does: its finished operations in the processing-time
histogram, bucketed by its level, the late ones in ``opsconsole_late_operations``; its unfinished
ones at risk or late on the Service levels page (tests/console/test_service_levels.py)."""

from datetime import timedelta

import pytest

from ledger.core import tallies
from tests.ledger.conftest import START

TOKEN = "scrape-me-0123456789"
INVOICE = {"request_id": "INV-1", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


@pytest.fixture
def frozen(time_machine):
    time_machine.move_to(START, tick=False)
    return time_machine


def claim(api, request_id: str) -> dict:
    answer = api.post(
        "/api/v1/claims",
        {"action": "send-invoice", "data": INVOICE | {"request_id": request_id}, "lease_seconds": 3600},
    )
    assert answer.status_code == 201, answer.json()
    return answer.json()


def succeed(api, claimed: dict) -> None:
    reported = api.post(f"/api/v1/claims/{claimed['key']}/outcome", {"token": claimed["token"], "outcome": "succeeded"})
    assert reported.status_code == 200, reported.json()


def test_a_configured_actions_late_finish_is_counted_against_its_own_level(
    api, client, send_invoice_action, frozen, settings
):
    settings.OPSCONSOLE_METRICS_TOKEN = TOKEN
    on_time, late = claim(api, "INV-1"), claim(api, "INV-2")
    frozen.move_to(START + timedelta(minutes=10), tick=False)
    succeed(api, on_time)
    frozen.move_to(START + timedelta(minutes=31), tick=False)
    succeed(api, late)

    totals = tallies.totals()
    labels = '{"action": "send-invoice"}'
    assert (totals[(tallies.FINISHED, labels)], totals[(tallies.LATE, labels)]) == (2, 1)
    assert tallies.buckets("send-invoice")[-1] > 1800  # its histogram is drawn around its 30 minutes
    scraped = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
    assert 'opsconsole_late_operations_total{action="send-invoice"} 1.0' in scraped
