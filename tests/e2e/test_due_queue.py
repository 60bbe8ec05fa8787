"""An operator sees work that waits for its caller's claim: an invoice whose claim expired and whose
lookup found nothing at the vendor is listed under "Due for their callers", the health line says
how long the oldest has waited, and the age filter narrows the list."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from ledger.callers import claims
from ledger.models import Attempt, Operation
from reconciliation.reconcile import reconcile_operation
from tests.e2e.conftest import OPERATOR, log_in, make_user, screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("send_invoice_action")]

INVOICE = {"request_id": "INV-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def test_an_expired_claim_the_vendor_never_saw_is_due_in_the_queue(page, workspace, standin):
    make_user("operator", OPERATOR)
    raw = {"action": "send-invoice", "data": INVOICE, "lease_seconds": 5}
    claimed = claims.claim(workspace=workspace, raw=raw, submitted_by="token:n8n-flow")
    Operation.objects.filter(pk=claimed.operation.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert claims.claim(workspace=workspace, raw=raw, submitted_by="token:n8n-flow").status == "unknown"
    Attempt.objects.update(started_at=timezone.now() - timedelta(minutes=5))
    assert reconcile_operation(Operation.objects.get(), asked_by_person=True) == "absent"
    Operation.objects.update(created_at=timezone.now() - timedelta(hours=2))

    log_in(page, "operator")
    page.goto("/console/")
    # How long in words, not a count of seconds.
    expect(page.get_by_role("link", name="Due for their callers' claims")).to_have_text(
        re.compile(r"oldest [0-9]+ (s|min)$")
    )
    page.get_by_role("link", name="Due for their callers' claims").click()
    # What these are, why All does not count them, and what a person may do about them.
    explained = page.locator("#due-explained")
    expect(explained).to_contain_text("opsconsole does not perform them: each waits for its flow to claim it")
    expect(explained).to_contain_text("GET /api/v1/claims/due")
    expect(explained).to_contain_text("Not counted under All")
    row = page.get_by_role("row").filter(has_text=claimed.operation.key)
    expect(row).to_contain_text("INV-7 v1 · invoice in EUR")
    expect(row).to_contain_text("Retrying")
    page.get_by_label("Age", exact=True).select_option("1h")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_role("row").filter(has_text=claimed.operation.key)).to_be_visible()
    screenshot(page, "queue-due-for-callers")
    page.screenshot(path="/tmp/notify-queue.png", full_page=True)

    # Its page says it waits for its caller, not for opsconsole's workers, and that it may be claimed now.
    page.get_by_role("row").filter(has_text=claimed.operation.key).get_by_role("link").click()
    expect(page.locator("#waits-for-caller")).to_contain_text(
        "Waiting for its caller: opsconsole never performs send-invoice."
    )
    expect(page.locator("#waits-for-caller")).to_contain_text("It may be claimed now.")
    expect(page.locator("dt", has_text="Next claim").locator("+ dd")).to_have_text("may be claimed now")
    expect(page.locator("dt", has_text="Next attempt")).to_have_count(0)
    screenshot(page, "operation-due-for-its-caller")

    page.goto("/console/?state=due")
    page.get_by_label("Age", exact=True).select_option("7d")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_text("No operation waits for its caller's claim.")).to_be_visible()
