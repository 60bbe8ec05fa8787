"""What the Content Security Policy and the login lockout look like to a person in Chromium."""

import pytest
from django.conf import settings
from playwright.sync_api import expect

from tests.conftest import event
from tests.e2e.conftest import PASSWORD, log_in, make_user, screenshot

pytestmark = pytest.mark.e2e


@pytest.fixture
def refusals(page):
    """What the browser refused because of the Content Security Policy, as it reports it."""
    refused = []
    page.on(
        "console", lambda message: refused.append(message.text) if "Content Security Policy" in message.text else None
    )
    return refused


def test_the_api_docs_render_from_our_own_files_under_the_policy(page, refusals, api):
    """Swagger UI comes from our static files (the machine has no network: a CDN would leave the
    page blank) and runs without anything the policy refuses."""
    api.post("/api/v1/events", event("d-1"))  # the schema is the same with or without data
    requested = []
    page.on("request", lambda request: requested.append(request.url))

    page.goto("/api/v1/docs")
    operation = page.locator(".opblock-summary-path", has_text="/api/v1/events").first
    expect(operation).to_be_visible()
    operation.click()
    expect(page.get_by_role("button", name="Try it out")).to_be_visible()

    screenshot(page, "api-docs")
    assert refusals == []
    base = page.url.split("/api/")[0]
    assert [url for url in requested if not url.startswith(base)] == []


def test_console_and_admin_pages_work_under_the_policy(page, refusals, db):
    make_user("admin", is_staff=True, is_superuser=True)

    log_in(page, "admin")
    for path, heading in [
        ("/console/", "Needs attention"),
        ("/console/controls/", "Controls"),
        ("/console/audit/", "Audit"),
        ("/admin/", "Site administration"),
        ("/admin/ledger/operation/", "Select operation to view"),
    ]:
        page.goto(path)
        expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()

    assert refusals == []


def test_a_person_locked_out_after_wrong_passwords_sees_why(page, refusals, db):
    make_user("operator")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        page.goto("/accounts/login/")
        page.get_by_label("Username").fill("operator")
        page.get_by_label("Password").fill("a guess")
        with page.expect_navigation():
            page.get_by_role("button", name="Log in").click()

    expect(page.get_by_role("heading", name="Too many failed logins")).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text("logging in from this address is paused for 15 minutes")
    page.get_by_role("link", name="Back to the login page").click()
    page.get_by_label("Username").fill("operator")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Too many failed logins")).to_be_visible()
    screenshot(page, "locked-out")
    assert refusals == []
