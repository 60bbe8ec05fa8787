"""Recovering from an unknown outcome in the browser, as an operator would: the page says what waits
and when, Replay is refused while the destination cannot tell and goes ahead only once the risk is
ticked, a record found by hand is recorded; an approver is told why they cannot approve their own."""

import re

import pytest
from playwright.sync_api import expect

from ledger.core import accounts
from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, Operation
from reconciliation.reconcile import reconcile_operation
from tests.e2e.conftest import APPROVER, OPERATOR, log_in, make_user, screenshot

pytestmark = pytest.mark.e2e

LOOKUP_503 = {"kind": "status", "status": 503}


@pytest.fixture
def unknown(unknown_notice):
    return unknown_notice


@pytest.fixture
def operator(db):
    return make_user("operator", OPERATOR)


def test_it_shows_an_unknown_operation_and_looks_it_up_now(page, unknown, operator):
    log_in(page, "operator")
    page.goto(f"/console/operations/{unknown.pk}/")

    expect(page.get_by_text("The last try may have reached the destination and its answer was lost.")).to_be_visible()
    expect(page.get_by_text(re.compile(r"next lookup at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"))).to_be_visible()
    expect(page.get_by_role("button", name="Replay")).to_have_count(0)
    screenshot(page, "unknown-operation")

    page.get_by_role("button", name="Look up now").click()

    expect(page.get_by_role("status").filter(has_text="The destination has the record")).to_be_visible()
    expect(page.locator(".page-head .badge")).to_have_text("Succeeded")
    assert Operation.objects.get().external_id == "rec-1"


def test_it_refuses_a_risky_replay_until_the_risk_is_ticked(page, unknown, operator, standin, settings):
    settings.OPSCONSOLE_RECONCILE_GIVE_UP_SECONDS = 0
    standin.fail_next_lookup(LOOKUP_503, LOOKUP_503, LOOKUP_503)
    assert reconcile_operation(unknown, asked_by_person=True) == "gave_up"
    log_in(page, "operator")
    page.goto(f"/console/operations/{unknown.pk}/")
    expect(page.get_by_text("A try of this operation may have reached the destination.")).to_be_visible()
    risk = page.get_by_label(re.compile("Replay even if the destination cannot tell"))
    expect(risk).not_to_be_checked()

    page.get_by_label("Reason").first.fill("customer asks again")
    page.get_by_role("button", name="Replay").click()

    expect(page.get_by_role("alert")).to_contain_text("Replay refused: the destination cannot tell")
    expect(page.locator(".page-head .badge")).to_have_text("Needs review")
    screenshot(page, "replay-refused")

    page.get_by_label("Reason").first.fill("vendor portal shows no notice for this key")
    page.get_by_label(re.compile("Replay even if the destination cannot tell")).check()
    page.get_by_role("button", name="Replay").click()

    expect(page.get_by_role("status").filter(has_text="accepting the duplicate risk")).to_be_visible()
    expect(page.locator(".page-head .badge")).to_have_text("Pending")
    forced = AuditEvent.objects.get(kind="replay_forced")
    assert forced.actor == "operator"
    assert "vendor portal shows no notice" in forced.message


def test_it_records_a_record_found_by_hand(page, unknown, operator):
    log_in(page, "operator")
    page.goto(f"/console/operations/{unknown.pk}/")

    page.get_by_label("Destination record id").fill("rec-1")
    page.get_by_label("How you checked").fill("found it in the vendor portal")
    page.get_by_role("button", name="Mark succeeded").click()

    expect(page.get_by_role("status").filter(has_text="succeeded with destination record rec-1")).to_be_visible()
    assert Operation.objects.get().state == "succeeded"


def test_it_tells_an_approver_why_they_cannot_approve_their_own_refund(page, workspace, live_server):
    approver = make_user("approver", APPROVER)
    token = accounts.issue_token(workspace=workspace, name="laptop", actor="test", user=approver)
    result = submit_event(
        workspace=workspace,
        source="api",
        submitted_by="approver",
        person=approver,
        raw={
            "action": "issue-refund",
            "data": {"request_id": "R-7", "version": 1, "customer_id": "C-1", "amount_cents": 2500, "currency": "EUR"},
        },
    )
    assert token
    assert result.operation.state == "pending_approval"
    log_in(page, "approver")

    page.goto(f"/console/operations/{result.operation.pk}/")

    expect(
        page.get_by_text("You submitted this operation, so another approver must approve or reject it")
    ).to_be_visible()
    expect(page.get_by_role("link", name="Approve")).to_have_count(0)
    expect(page.get_by_role("button", name="Reject")).to_have_count(0)
    screenshot(page, "four-eyes")
