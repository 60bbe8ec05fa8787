"""The operator console as a person uses it: log in, see what needs attention, decide, pause, look back."""

import re

import pytest
from playwright.sync_api import expect

from ledger.intake.submit import submit_event
from ledger.models import Approval, AuditEvent, Conflict, Control, Operation
from ledger.models.audit import AUDIT_KIND_GROUPS, AUDIT_KINDS
from ledger.people import pause
from tests.conftest import R42
from tests.e2e.conftest import APPROVER, OPERATOR, PASSWORD, log_in, make_user, screenshot

pytestmark = pytest.mark.e2e

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def submit(workspace, action: str, data: dict) -> Operation:
    result = submit_event(
        workspace=workspace, raw={"action": action, "data": data}, source="api", submitted_by="token:oc_test"
    )
    assert result.outcome == "accepted", result
    return result.operation


@pytest.fixture
def needs_review(workspace):
    """The R-42 brief, given up on after a permanent error: waiting for a person."""
    operation = submit(workspace, "prepare-brief", R42)
    Operation.objects.filter(pk=operation.pk).update(
        state="needs_review",
        attempts=1,
        last_error_category="permanent",
        last_error_message="owner is on leave",
    )
    operation.refresh_from_db()
    return operation


@pytest.fixture
def operator(db):
    return make_user("operator", OPERATOR)


def field(page, term: str):
    """The value shown for ``term`` in the operation page's definition list."""
    return page.locator("dt", has_text=re.compile(rf"^{re.escape(term)}$")).locator("xpath=following-sibling::dd[1]")


def form_with(page, button: str):
    """The form that holds the button named ``button``."""
    return page.locator("form").filter(has=page.get_by_role("button", name=button, exact=True))


def test_it_sends_a_person_through_login_to_what_needs_attention(page, needs_review, operator):
    """Every page wants a login; after it, the queue lists the operation that needs review,
    and its key leads to the operation's page."""
    page.goto("/console/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next="))

    page.get_by_label("Username").fill("operator")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()

    expect(page.get_by_role("heading", name="Needs attention")).to_be_visible()
    key_link = page.get_by_role("link", name=needs_review.key)
    row = page.get_by_role("row").filter(has=key_link)
    expect(row).to_contain_text("Needs review")
    expect(row).to_contain_text("owner is on leave")
    screenshot(page, "queue")

    key_link.click()

    expect(page.get_by_role("heading", level=1, name=needs_review.key)).to_be_visible()
    expect(page).to_have_url(re.compile(rf"/console/operations/{needs_review.pk}/\?list=queue$"))


def test_it_lands_on_needs_attention_after_logging_in(page, needs_review, operator):
    """Logging in from the login page itself leads to the queue."""
    log_in(page, "operator")

    expect(page).to_have_url(re.compile(r"/console/$"))
    expect(page.get_by_role("heading", name="Needs attention")).to_be_visible()
    expect(page.get_by_role("link", name=needs_review.key)).to_be_visible()


def test_it_replays_an_operation_with_a_reason(page, needs_review, operator):
    """The operator replays with a reason: the page confirms it, shows the operation pending, and
    the audit trail names the operator."""
    log_in(page, "operator")
    page.goto(f"/console/operations/{needs_review.pk}/")
    screenshot(page, "operation")

    replay = form_with(page, "Replay")
    replay.get_by_label("Reason").fill("owner is back")
    replay.get_by_role("button", name="Replay", exact=True).click()

    expect(page.get_by_role("status")).to_have_text(f"Replayed {needs_review.key}.")
    expect(field(page, "State")).to_have_text("Pending")
    audit_row = page.get_by_role("row").filter(has_text="replayed")
    expect(audit_row).to_contain_text("operator")
    expect(audit_row).to_contain_text("owner is back")
    assert Operation.objects.get(pk=needs_review.pk).state == "pending"


def test_it_keeps_the_operation_when_a_replay_has_no_reason(page, needs_review, operator):
    """Without a reason the server refuses the replay, and says so beside the field, next to the
    button pressed (no browser tooltip decides it). The operation still needs review."""
    log_in(page, "operator")
    page.goto(f"/console/operations/{needs_review.pk}/")
    replay = form_with(page, "Replay")

    replay.get_by_role("button", name="Replay", exact=True).click()

    expect(page.locator("#operation-reason-refused")).to_have_text("Reason is required; nothing was changed.")
    expect(page.locator(".messages")).to_contain_text("see why, beside the field")
    expect(field(page, "State")).to_have_text("Needs review")
    assert Operation.objects.get(pk=needs_review.pk).state == "needs_review"
    assert not AuditEvent.objects.filter(kind="replayed").exists()


def test_it_lets_only_an_approver_approve_a_refund(page, workspace, operator):
    """The operator sees no Approve button on a refund awaiting approval, and who must sign off; the
    approver approves it through the confirmation."""
    refund = submit(workspace, "issue-refund", REFUND)
    assert refund.state == "pending_approval"
    make_user("approver", APPROVER)

    log_in(page, "operator")
    page.goto(f"/console/operations/{refund.pk}/")
    expect(page.get_by_role("heading", level=1, name=refund.key)).to_be_visible()
    expect(page.get_by_role("link", name="Approve", exact=True)).to_have_count(0)
    expect(page.get_by_text("An approver of workspace demo must sign off on this payload")).to_be_visible()
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/accounts/login/$"))

    log_in(page, "approver")
    page.goto(f"/console/operations/{refund.pk}/")
    page.get_by_role("link", name="Approve", exact=True).click()
    page.get_by_label("Note").fill("customer called")
    page.get_by_role("button", name="Confirm", exact=True).click()

    # Nothing else awaits this approver: they land on their (empty) work list, not on the same refund.
    expect(page.get_by_role("status")).to_have_text(f"Approved {refund.key}. Nothing else awaits your approval.")
    expect(page).to_have_url(re.compile(r"/console/approvals/$"))
    page.goto(f"/console/operations/{refund.pk}/")
    expect(field(page, "State")).to_have_text("Pending")
    approval = Approval.objects.get(operation=refund)
    assert (approval.decision, approval.approver, approval.note) == ("approved", "approver", "customer called")


def test_it_applies_the_incoming_payload_of_a_conflict(page, workspace, operator):
    """A resend with another title shows as a conflict on the title; applying it takes the new title."""
    operation = submit(workspace, "prepare-brief", R42)
    corrected = "Review renewal options before Friday"
    resend = submit_event(
        workspace=workspace, source="api", raw={"action": "prepare-brief", "data": R42 | {"title": corrected}}
    )
    assert resend.outcome == "conflict", resend

    log_in(page, "operator")
    page.goto(f"/console/operations/{operation.pk}/")
    conflict = form_with(page, "Apply incoming payload")
    expect(page.get_by_role("listitem").filter(has_text="Title:")).to_have_text(
        f"Title: Review renewal options → {corrected}"
    )

    conflict.get_by_label("Reason").fill("sender corrected the title")
    conflict.get_by_role("button", name="Apply incoming payload").click()

    expect(page.get_by_role("status")).to_have_text(
        f"Applied the incoming payload of conflict {resend.conflict.pk} to {operation.key}."
    )
    expect(field(page, "Title")).to_have_text(corrected)
    expect(page.get_by_role("button", name="Apply incoming payload")).to_have_count(0)
    assert Operation.objects.get(pk=operation.pk).payload["title"] == corrected
    assert Conflict.objects.get().status == "applied"


def test_it_pauses_and_resumes_from_the_controls_page(page, workspace, operator):
    """A pause with a reason is listed with who pulled it; Resume releases it."""
    log_in(page, "operator")
    page.get_by_role("link", name="Controls", exact=True).click()

    page.get_by_label("Workspace").select_option(label="demo")
    page.get_by_label("Reason").fill("destination maintenance")
    page.get_by_role("button", name="Pause", exact=True).click()

    expect(page.get_by_role("status")).to_have_text("Paused workspace demo.")
    switch = page.get_by_role("row").filter(has_text="destination maintenance")
    expect(switch).to_contain_text("demo")
    expect(switch).to_contain_text("operator")
    assert Control.objects.get(workspace=workspace).paused

    switch.get_by_role("button", name="Resume").click()

    expect(page.get_by_role("status")).to_have_text("Resumed workspace demo.")
    expect(page.get_by_role("row").filter(has_text="destination maintenance")).to_have_count(0)
    assert not Control.objects.get(workspace=workspace).paused
    assert list(AuditEvent.objects.filter(actor="operator").values_list("kind", flat=True)) == ["paused", "resumed"]


def test_it_filters_the_audit_page_by_kind(page, workspace, operator):
    """The Kind filter is a list of the kinds there are, by topic; chosen, the audit page lists only
    events of that kind, and the list still shows the choice."""
    submit(workspace, "prepare-brief", R42)
    pause.set_paused(paused=True, actor="alice", reason="maintenance", workspace=workspace)
    pause.set_paused(paused=False, actor="alice", workspace=workspace)
    assert AuditEvent.objects.filter(kind="reserved").exists()

    log_in(page, "operator")
    page.get_by_role("link", name="Audit", exact=True).click()
    kind = page.get_by_label("Kind")
    expect(kind).to_have_value("")  # All kinds
    expect(kind.locator("optgroup")).to_have_count(len(AUDIT_KIND_GROUPS))
    expect(kind.locator("option")).to_have_count(len(AUDIT_KINDS) + 1)
    kind.select_option("paused")
    page.get_by_role("button", name="Filter").click()

    rows = page.get_by_role("row").filter(has_not=page.get_by_role("columnheader"))
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text("paused")
    expect(rows).to_contain_text("alice")
    expect(page.get_by_label("Kind")).to_have_value("paused")
    screenshot(page, "audit")
