"""An operator sees which work is late or at risk against its action's service level."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from ledger.intake.submit import submit_event
from ledger.models import Operation
from tests.conftest import R42
from tests.e2e.conftest import OPERATOR, log_in, make_user, screenshot

pytestmark = pytest.mark.e2e


def test_the_service_levels_page_lists_late_and_at_risk_work(page, workspace):
    make_user("operator", OPERATOR)
    late = submit_event(workspace=workspace, source="api", raw={"action": "prepare-brief", "data": R42}).operation
    risky = submit_event(
        workspace=workspace, source="api", raw={"action": "prepare-brief", "data": R42 | {"request_id": "R-43"}}
    ).operation
    # As they would stand, arrived 20 and 4.5 minutes ago (prepare-brief's service level: 5 minutes).
    Operation.objects.filter(pk=late.pk).update(created_at=timezone.now() - timedelta(minutes=20))
    Operation.objects.filter(pk=risky.pk).update(created_at=timezone.now() - timedelta(seconds=270))

    log_in(page, "operator")
    page.get_by_role("link", name="Service levels").click()

    expect(page.get_by_role("row", name="prepare-brief 5 min 1 1")).to_be_visible()
    # An action without one is named, with where to give it one: not missing without a word.
    expect(page.locator("#without-level")).to_contain_text("No service level, so never at risk or late:")
    expect(page.locator("#without-level")).to_contain_text("notify-subscriber")
    expect(page.locator("#without-level")).to_contain_text("service_level_seconds")
    expect(page.locator("#without-level")).not_to_contain_text("prepare-brief")
    expect(page.get_by_role("row").filter(has_text=late.key)).to_contain_text("late: past its 5 min")
    expect(page.get_by_role("row").filter(has_text=risky.key)).to_contain_text("at risk")
    screenshot(page, "service-levels")

    page.get_by_role("link", name=late.key).click()
    expect(page.get_by_role("status").filter(has_text="Late: 20 min since it arrived")).to_be_visible()


def test_a_configured_caller_actions_service_level_is_on_the_page(page, workspace, send_invoice_action):
    """The demo's send-invoice promises 30 minutes in its integrations file (no Python): its claimed,
    unreported work is late or at risk against that."""
    from ledger.callers import claims

    make_user("operator", OPERATOR)
    invoice = {"request_id": "INV-1", "version": 1, "customer_id": "C-1", "amount_cents": 4500, "currency": "EUR"}
    keys = []
    for request_id, minutes in (("INV-1", 45), ("INV-2", 26)):
        raw = {"action": "send-invoice", "data": invoice | {"request_id": request_id}, "lease_seconds": 3600}
        claimed = claims.claim(workspace=workspace, raw=raw, submitted_by="token:n8n-flow")
        Operation.objects.filter(pk=claimed.operation.pk).update(created_at=timezone.now() - timedelta(minutes=minutes))
        keys.append(claimed.operation.key)

    log_in(page, "operator")
    page.get_by_role("link", name="Service levels").click()

    expect(page.get_by_role("row", name="send-invoice 30 min 1 1")).to_be_visible()
    expect(page.get_by_role("row").filter(has_text=keys[0])).to_contain_text("late: past its 30 min")
    expect(page.get_by_role("row").filter(has_text=keys[1])).to_contain_text("at risk")
    screenshot(page, "service-levels-configured")
