"""Paging the console's long lists as a person does: "Older" goes on after the last row shown,
"Newer" comes back, "Newest" returns to the top, and the filters stay applied throughout."""

import re

import pytest
from playwright.sync_api import expect

from ledger.models import Operation
from ledger.people import pause
from tests.e2e.conftest import OPERATOR, log_in, make_user, screenshot
from tests.ledger.conftest import submit_brief

pytestmark = pytest.mark.e2e


@pytest.fixture
def operator(db):
    return make_user("operator", OPERATOR)


def body_rows(page):
    return page.get_by_role("row").filter(has_not=page.get_by_role("columnheader"))


def test_it_pages_the_audit_trail_keeping_the_filter(page, workspace, operator):
    for number in range(130):
        pause.set_paused(paused=number % 2 == 0, actor="alice", reason=f"incident {number}", workspace=workspace)

    log_in(page, "operator")
    page.goto("/console/audit/?actor=alice")
    expect(body_rows(page)).to_have_count(100)
    expect(page.get_by_role("link", name="Newer")).to_have_count(0)
    screenshot(page, "audit-newest")

    page.get_by_role("link", name="Older").click()
    expect(body_rows(page)).to_have_count(30)
    expect(page.get_by_label("Actor")).to_have_value("alice")
    expect(page.get_by_role("link", name="Older")).to_have_count(0)
    screenshot(page, "audit-older")

    page.get_by_role("link", name="Newer").click()
    expect(body_rows(page)).to_have_count(100)
    page.get_by_role("link", name="Older").click()
    page.get_by_role("link", name="Newest").click()
    expect(page).to_have_url(re.compile(r"/console/audit/\?actor=alice$"))
    expect(body_rows(page)).to_have_count(100)


def test_it_pages_the_queue_keeping_the_filter(page, workspace, operator):
    for number in range(60):
        submit_brief(workspace, request_id=f"R-{number}")
    Operation.objects.update(
        state="needs_review", last_error_category="permanent", last_error_message="owner is on leave"
    )

    log_in(page, "operator")
    page.goto("/console/?state=needs_review")
    expect(page.get_by_text("60 operations")).to_be_visible()
    expect(body_rows(page)).to_have_count(50)
    expect(body_rows(page).first).to_contain_text("demo:R-59:v3:prepare-brief")
    screenshot(page, "queue-newest")

    page.get_by_role("link", name="Older").click()
    expect(body_rows(page)).to_have_count(10)
    expect(body_rows(page).last).to_contain_text("demo:R-0:v3:prepare-brief")
    expect(page.get_by_label("State")).to_have_value("needs_review")
    screenshot(page, "queue-older")
