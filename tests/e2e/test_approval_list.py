"""Approval as a work list, as an approver sees it: the refunds awaiting them with amounts, a total
and who is behind each; tick some, one confirmation that repeats them with their fingerprints and
the total, confirm, and the list again with the result and what is left."""

import re

import pytest
from playwright.sync_api import expect

from ledger.intake.submit import submit_event
from ledger.models import Approval, AuditEvent
from tests.e2e.conftest import APPROVER, OPERATOR, log_in, make_user, screenshot

pytestmark = pytest.mark.e2e

REFUND = {"request_id": "R-1", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def refund(workspace, person, number: int, **data):
    """A refund sent by ``person`` (the entry point records them as its submitter)."""
    data = REFUND | {"request_id": f"R-{number}", "customer_id": f"C-{1000 + number}"} | data
    return submit_event(
        workspace=workspace,
        source="api",
        submitted_by=person.get_username(),
        person=person,
        raw={"action": "issue-refund", "data": data},
    ).operation


def test_an_approver_works_the_list_select_confirm_result(page, workspace):
    sender = make_user("sender", OPERATOR)
    approver = make_user("approver", APPROVER)
    refunds = [refund(workspace, sender, n, amount_cents=1000 * n) for n in range(1, 6)]
    dollars = refund(workspace, sender, 6, amount_cents=1999, currency="USD")
    mine = refund(workspace, approver, 7, amount_cents=50_000)

    log_in(page, "approver")
    page.get_by_role("link", name="Approvals", exact=True).click()
    expect(page).to_have_url(re.compile(r"/console/approvals/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Awaiting your approval")
    expect(page.locator("#approval-summary")).to_contain_text(
        "7 operations await approval in your workspaces, totalling 650.00 EUR, 19.99 USD."
    )
    rows = page.locator("table.approvals tbody tr")
    expect(rows).to_have_count(7)
    first = rows.filter(has_text=refunds[0].key)
    expect(first.locator("td.amount")).to_have_text("10.00 EUR")
    expect(first).to_contain_text("sender (submitted)")
    expect(first).to_contain_text("Customer")
    expect(first).to_contain_text("C-1001")
    own = rows.filter(has_text=mine.key)
    expect(own).to_contain_text("You submitted it: another approver must decide (four eyes)")
    expect(own.get_by_role("checkbox")).to_be_disabled()
    expect(page.get_by_text("amount_cents")).to_have_count(0)
    screenshot(page, "approvals")
    page.set_viewport_size({"width": 390, "height": 844})
    expect(page.get_by_role("button", name="Approve selected…")).to_be_in_viewport()
    screenshot(page, "approvals-narrow")
    page.set_viewport_size({"width": 1280, "height": 900})

    page.get_by_role("checkbox", name="Select all on this page").check()
    page.get_by_role("checkbox", name=f"Select {refunds[4].key}").uncheck()
    page.get_by_role("button", name="Approve selected…").click()

    expect(page).to_have_url(re.compile(r"/console/approvals/confirm/\?"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Approve 5 operations?")
    expect(page.locator("#approval-total")).to_have_text(
        "Total approved if you confirm: 100.00 EUR, 19.99 USD, 5 operations."
    )
    for op in [*refunds[:4], dollars]:
        row = page.locator("table.approvals tbody tr").filter(has_text=op.key)
        expect(row.locator("code")).to_have_text(op.fingerprint)
        expect(row).to_contain_text(op.payload["customer_id"])
    expect(page.locator("table.approvals tbody tr")).to_have_count(5)
    assert not Approval.objects.exists()  # looking is not approving
    screenshot(page, "approvals-confirm")

    page.get_by_label("Note").fill("weekly refunds")
    page.get_by_role("button", name="Confirm", exact=True).click()

    expect(page).to_have_url(re.compile(r"/console/approvals/$"))
    expect(page.get_by_role("status").filter(has_text="Approved")).to_have_text(
        "Approved 5 of 5 operations (100.00 EUR, 19.99 USD)."
    )
    expect(page.locator("table.approvals tbody tr")).to_have_count(2)  # the one left out, and the approver's own
    expect(page.locator("#approval-summary")).to_contain_text("2 operations await approval")
    screenshot(page, "approvals-result")
    assert Approval.objects.filter(decision="approved", approver="approver").count() == 5
    assert (
        AuditEvent.objects.filter(kind="approval_approved", message__startswith="weekly refunds (payload ").count() == 5
    )


def test_a_stale_confirmation_names_what_it_refused(page, workspace):
    sender = make_user("sender", OPERATOR)
    make_user("approver", APPROVER)
    colleague = make_user("colleague", APPROVER)
    first, second = refund(workspace, sender, 1), refund(workspace, sender, 2)

    log_in(page, "approver")
    page.goto("/console/approvals/")
    page.get_by_role("checkbox", name="Select all on this page").check()
    page.get_by_role("button", name="Approve selected…").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Approve 2 operations?")
    # A colleague approves the first while this page is open.
    from ledger.people.approvals import approve_operation

    approve_operation(first, user=colleague, fingerprint=first.fingerprint)
    page.get_by_role("button", name="Confirm", exact=True).click()

    expect(page.get_by_role("status").filter(has_text="Approved")).to_have_text(
        "Approved 1 of 2 operations (45.00 EUR)."
    )
    expect(page.get_by_role("alert")).to_have_text(f"Not approved: {first.key} was already approved by colleague.")
    expect(page.get_by_text("Nothing awaits your approval.")).to_be_visible()
    screenshot(page, "approvals-stale")
    assert list(second.approvals.values_list("approver", flat=True)) == ["approver"]


def test_approve_selected_with_nothing_ticked_says_so(page, workspace):
    refund(workspace, make_user("sender", OPERATOR), 1)
    make_user("approver", APPROVER)

    log_in(page, "approver")
    page.goto("/console/approvals/")
    page.get_by_role("button", name="Approve selected…").click()

    expect(page).to_have_url(re.compile(r"/console/approvals/$"))
    expect(page.get_by_role("alert")).to_have_text("Select at least one operation to approve; nothing was approved.")
    assert not Approval.objects.exists()
