"""An operator meets an operation its caller performs (docs/claims.md): while the caller holds the
claim, the page says who and until when; after the lease expires with no report, the operation is
unknown in the queue, and the operator marks it succeeded with the record the caller left."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from ledger.callers import claims
from ledger.models import Operation
from tests.e2e.conftest import OPERATOR, log_in, make_user, screenshot

pytestmark = pytest.mark.e2e

INVOICE = {"request_id": "INV-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def claim(workspace):
    raw = {"action": "send-invoice", "data": INVOICE, "lease_seconds": 120}
    return claims.claim(workspace=workspace, raw=raw, submitted_by="token:n8n-flow")


def test_an_expired_claim_is_unknown_and_an_operator_resolves_it(page, workspace, send_invoice_action):
    make_user("operator", OPERATOR)
    claimed = claim(workspace)

    log_in(page, "operator")
    page.goto(f"/console/operations/{claimed.operation.pk}/")
    expect(page.get_by_role("status").filter(has_text="Performed by the caller")).to_contain_text(
        "token:n8n-flow holds claim 1"
    )
    screenshot(page, "claim-held-by-caller")

    Operation.objects.filter(pk=claimed.operation.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert claim(workspace).status == "unknown"
    page.goto("/console/?state=unknown")
    row = page.get_by_role("row").filter(has_text=claimed.operation.key)
    expect(row).to_contain_text("the caller reported no outcome before its lease expired")
    screenshot(page, "queue-expired-claim")

    row.get_by_role("link", name=claimed.operation.key).click()
    page.get_by_label("Destination record id").fill("inv_77")
    page.get_by_label("How you checked").fill("found it in the vendor's invoice list")
    page.get_by_role("button", name="Mark succeeded").click()
    expect(page.locator(".page-head .badge")).to_have_text("Succeeded")
    screenshot(page, "expired-claim-resolved")
    assert claim(workspace).status == claims.DONE
