"""A note that would leak a masked value, as an operator meets it: the page says beside the reason
who reads it; a reason quoting the customer's id is refused beside the field, naming the field and
not the value, the text is not shown again and nothing is written; a reason without it is kept."""

import os

import pytest
from playwright.sync_api import expect

from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, Operation
from ledger.states import State
from tests.e2e.conftest import OPERATOR, SHOTS, log_in, make_user, screenshot

pytestmark = pytest.mark.e2e

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def test_an_operator_is_told_beside_the_reason_that_it_quotes_a_masked_value(page, workspace):
    refund = submit_event(workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND}).operation
    Operation.objects.filter(pk=refund.pk).update(state=State.NEEDS_REVIEW)  # test setup only
    make_user(OPERATOR, "operator")
    log_in(page, OPERATOR)
    page.goto(f"/console/operations/{refund.pk}/")
    reason = page.get_by_label("Reason", exact=True)
    readers = page.locator("#operation-reason-readers")
    expect(readers).to_have_text(
        "Visible to everyone in workspace demo, including viewers and operators, who do not see sensitive values: "
        "a note that quotes one is refused."
    )
    expect(reason).to_have_attribute("aria-describedby", "operation-reason-refused operation-reason-readers")
    events = AuditEvent.objects.count()

    reason.fill("Customer  c-1001 called: no refund")
    page.get_by_role("button", name="Cancel").click()

    refused = page.locator("#operation-reason-refused")
    expect(refused).to_have_text(
        "The reason contains the customer_id of this operation; sensitive values are masked for viewers and "
        "operators: describe it without the value. Nothing was changed."
    )
    expect(refused).to_have_attribute("role", "alert")
    # Beside the field: right under it, above the line that says who reads it.
    box, field = refused.bounding_box(), reason.bounding_box()
    assert 0 <= box["y"] - (field["y"] + field["height"]) < 40
    assert readers.bounding_box()["y"] > box["y"]
    expect(page.get_by_role("link", name="see why, beside the field")).to_have_attribute("href", "#operation-reason")
    expect(reason).to_have_value("")
    expect(page.get_by_text("1001")).to_have_count(0)
    expect(page.locator(".badge").first).to_have_text("Needs review")
    assert AuditEvent.objects.count() == events
    page.locator("section.actions").screenshot(path=_shot("sensitive-note-refused"))
    screenshot(page, "sensitive-note-refused-page")

    reason.fill("The customer called: no refund (ticket T-55)")
    page.get_by_role("button", name="Cancel").click()

    expect(page.get_by_text(f"Cancelled {refund.key}.")).to_be_visible()
    expect(page.locator("#operation-reason-refused")).to_have_count(0)
    assert AuditEvent.objects.get(kind="cancelled").message == "cancel: The customer called: no refund (ticket T-55)"


def _shot(name: str) -> str:
    """Where a screenshot of part of the page goes (``screenshot`` takes the whole page)."""
    os.makedirs(SHOTS, exist_ok=True)
    return os.path.join(SHOTS, f"{name}.png")
