"""The approve confirmation: an approver approves a refund through a page that repeats what is
being approved (action, key, workspace, amount and customer, who sent it, the fingerprint), then
lands on the next refund awaiting their decision."""

import re

import pytest
from playwright.sync_api import expect

from ledger.intake.submit import submit_event
from ledger.models import Approval
from tests.e2e.conftest import APPROVER, OPERATOR, log_in, make_user, screenshot

pytestmark = pytest.mark.e2e

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 2500, "currency": "EUR"}


def shown(page, term: str):
    return page.locator("dt", has_text=re.compile(rf"^{re.escape(term)}$")).locator("xpath=following-sibling::dd[1]")


def test_an_approver_approves_a_refund_through_the_confirmation(page, workspace):
    sender = make_user("sender", OPERATOR)
    refund = submit_event(
        workspace=workspace,
        source="api",
        submitted_by="sender",
        person=sender,
        raw={"action": "issue-refund", "data": REFUND},
    ).operation
    following = submit_event(
        workspace=workspace,
        source="api",
        submitted_by="sender",
        person=sender,
        raw={"action": "issue-refund", "data": REFUND | {"request_id": "R-8"}},
    ).operation
    make_user("approver", APPROVER)

    log_in(page, "approver")
    page.goto(f"/console/operations/{refund.pk}/")
    expect(shown(page, "Amount")).to_have_text("25.00 EUR")
    page.get_by_role("link", name="Approve", exact=True).click()

    expect(page).to_have_url(re.compile(rf"/console/operations/{refund.pk}/approve/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Approve {refund.key}?")
    for term, value in [
        ("Action", "issue-refund"),
        ("Key", refund.key),
        ("Workspace", "demo"),
        ("Amount", "25.00 EUR"),
        ("Customer", "C-1001"),
        ("Submitted by", "sender (submitted)"),
        ("Payload fingerprint", refund.fingerprint),
    ]:
        expect(shown(page, term)).to_have_text(value)
    assert Approval.objects.count() == 0  # looking is not approving
    screenshot(page, "approve-confirm")

    page.get_by_label("Note").fill("customer called")
    page.get_by_role("button", name="Confirm", exact=True).click()

    # On to the next refund awaiting a decision, not back to the one just approved.
    expect(page).to_have_url(re.compile(rf"/console/operations/{following.pk}/$"))
    expect(page.get_by_role("status").filter(has_text="Approved")).to_have_text(
        f"Approved {refund.key}. Next awaiting your approval: {following.key}."
    )
    expect(shown(page, "State")).to_have_text("Awaiting approval")
    expect(page.get_by_role("link", name="Approve", exact=True)).to_be_visible()
    screenshot(page, "approve-confirm-approved")
    approval = Approval.objects.get()
    assert (approval.decision, approval.approver, approval.note, approval.fingerprint) == (
        "approved",
        "approver",
        "customer called",
        refund.fingerprint,
    )


def test_back_leaves_it_awaiting_approval(page, workspace):
    refund = submit_event(workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND}).operation
    make_user("approver", APPROVER)

    log_in(page, "approver")
    page.goto(f"/console/operations/{refund.pk}/approve/")
    page.get_by_role("link", name="Back", exact=True).click()

    expect(page).to_have_url(re.compile(rf"/console/operations/{refund.pk}/$"))
    expect(shown(page, "State")).to_have_text("Awaiting approval")
    assert Approval.objects.count() == 0
