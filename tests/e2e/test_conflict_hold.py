"""A refund sent again with another amount before anyone approved it: the operation is held (the
queue, the conflicts inbox and its page say why, and offer no replay); an admin applies the corrected
amount, and the refund goes back to await approval with it. A second refund's conflict is dismissed
from its own page, and it awaits approval as first sent."""

import pytest
from playwright.sync_api import expect

from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, Operation
from tests.e2e.conftest import log_in, make_user, screenshot

pytestmark = pytest.mark.e2e

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def refund_sent_twice(workspace, request_id: str, second_amount: int) -> Operation:
    first = {**REFUND, "request_id": request_id}
    for delivery, data in (("d-1", first), ("d-2", {**first, "amount_cents": second_amount})):
        submit_event(
            workspace=workspace,
            source="api",
            raw={"action": "issue-refund", "delivery_id": f"{request_id}-{delivery}", "data": data},
        )
    operation = Operation.objects.get(key=f"demo:{request_id}:v1:issue-refund")
    assert operation.state == "needs_review"
    return operation


def test_a_held_refund_says_why_and_a_decision_releases_it(page, workspace):
    make_user("lead", "admin")  # reviews and sees the amounts
    held = refund_sent_twice(workspace, "R-7", 5000)
    other = refund_sent_twice(workspace, "R-8", 9900)

    log_in(page, "lead")
    row = page.get_by_role("row").filter(has_text=held.key)
    expect(row).to_contain_text("held: a conflicting delivery arrived")

    page.get_by_role("link", name="Open conflicts: 2").click()
    row = page.locator(f"#conflict-{held.conflicts.get().pk}")
    expect(row.locator(".held-by-conflict")).to_have_text("held by this conflict")
    expect(row.locator("td.differences")).to_have_text("Amount: 45.00 EUR → 50.00 EUR")

    row.get_by_label("Reason").fill("the customer's corrected amount")
    row.get_by_role("button", name="Apply incoming and release").click()
    expect(page.get_by_role("status").first).to_contain_text("Applied the incoming payload of conflict")
    expect(page.locator("#held tbody tr").filter(has_text=held.key)).to_have_count(0)
    held.refresh_from_db()
    assert (held.state, held.payload["amount_cents"], held.last_error_category) == ("pending_approval", 5000, "")
    assert AuditEvent.objects.filter(operation=held, kind="conflict_released").count() == 1

    page.goto(f"/console/operations/{other.pk}/")
    expect(page.locator("#held-by-conflict")).to_contain_text("Held for review: a conflicting delivery arrived")
    expect(page.get_by_role("button", name="Replay")).to_have_count(0)
    expect(page.get_by_role("button", name="Mark succeeded")).to_have_count(0)
    screenshot(page, "operation-held-by-conflict")
    decide = page.get_by_role("form", name="Decide conflict")
    decide.get_by_label("Reason").fill("a stale resend; the first amount stands")
    decide.get_by_role("button", name="Dismiss").click()

    expect(page.locator("#held-by-conflict")).to_have_count(0)
    expect(page.locator(".page-head .badge")).to_have_text("Awaiting approval")
    other.refresh_from_db()
    assert (other.state, other.payload["amount_cents"]) == ("pending_approval", 4500)
    screenshot(page, "operation-released")
