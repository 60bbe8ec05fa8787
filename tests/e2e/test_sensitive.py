"""A refund's customer and amount as people see them: masked for a viewer, shown to the approver
who must judge them."""

import re

import pytest
from playwright.sync_api import expect

from ledger.intake.submit import submit_event
from tests.e2e.conftest import APPROVER, log_in, make_user

pytestmark = pytest.mark.e2e

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def value_of(page, term: str):
    payload = page.locator("dl.payload")
    return payload.locator("dt", has_text=re.compile(rf"^{term}$")).locator("xpath=following-sibling::dd[1]")


def test_a_viewer_sees_the_mask_and_the_approver_the_values(page, workspace):
    refund = submit_event(workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND}).operation
    make_user("watcher", "viewer")
    make_user("approver", APPROVER)

    log_in(page, "watcher")
    page.goto(f"/console/operations/{refund.pk}/")
    expect(value_of(page, "Customer")).to_have_text("••••")
    expect(value_of(page, "Amount")).to_have_text("••••")
    expect(value_of(page, "Currency")).to_have_text("EUR")
    expect(page.get_by_text("Sensitive values are masked: an approver or admin of demo sees them.")).to_be_visible()
    expect(page.get_by_text("C-1001")).to_have_count(0)
    page.screenshot(path="/tmp/sensitive-viewer.png", full_page=True)
    page.get_by_role("button", name="Log out").click()

    log_in(page, "approver")
    page.goto(f"/console/operations/{refund.pk}/")
    expect(value_of(page, "Customer")).to_have_text("C-1001")
    expect(value_of(page, "Amount")).to_have_text("45.00 EUR")
    expect(page.get_by_text("Sensitive values are masked")).to_have_count(0)
    expect(page.get_by_role("link", name="Approve", exact=True)).to_be_visible()
    page.screenshot(path="/tmp/sensitive-approver.png", full_page=True)
