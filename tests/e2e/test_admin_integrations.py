"""What flows need, configured in the admin as a newcomer reads it: a subscription to notifications
(each event said in words, each mistake said beside its field, with what to write instead), API
tokens and their scopes, and a caller action's fields, each with what it means."""

import pytest
from playwright.sync_api import expect

from ledger.models import ApiToken, Subscription
from tests.e2e.conftest import log_in, make_user, screenshot
from tests.subscribed import SECRET, SECRET_ENV

pytestmark = pytest.mark.e2e


def field_row(page, name: str):
    """The admin form's row of field ``name`` (its label, input, help and errors)."""
    return page.locator(f".form-row.field-{name}")


def test_a_subscription_with_a_bad_url_and_a_foreign_variable_is_refused_beside_each_field(
    page, workspace, monkeypatch
):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    make_user("boss", "admin", is_staff=True)
    log_in(page, "boss", path="/admin/login/")
    page.goto("/admin/ledger/subscription/add/")
    expect(field_row(page, "events")).to_contain_text(
        "operation.due: an operation its caller performs may be claimed now"
    )
    expect(field_row(page, "secret_env")).to_contain_text("It starts with the workspace's prefix")
    # Each event on one line, not squeezed into the admin's 160 px label column mid-word.
    assert page.locator("label[for=id_events_3]").bounding_box()["height"] < 30
    expect(field_row(page, "secrets")).to_contain_text("shown once saved")

    page.get_by_label("Workspace").select_option(label="demo")
    page.get_by_label("Name").fill("n8n")
    page.get_by_label("URL").fill("ftp://flows.example.com/hooks")
    page.get_by_label("Secret variable").fill("SECRET_KEY")
    page.get_by_role("button", name="Save", exact=True).click()

    expect(field_row(page, "url")).to_contain_text("an http:// or https:// URL, at most 500 characters")
    expect(field_row(page, "events")).to_contain_text("Tick at least one event.")
    expect(field_row(page, "secret_env")).to_contain_text(
        "SECRET_KEY is not workspace demo's to name: the variables its sources and subscriptions name start with "
        "OPSCONSOLE_SOURCE_DEMO_"
    )
    expect(page.locator("ul.errorlist.nonfield")).to_have_count(0)  # nothing said away from its field
    screenshot(page, "admin-subscription-refused")
    assert not Subscription.objects.exists()

    page.get_by_label("URL").fill("https://flows.example.com/hooks")
    page.get_by_label("operation.due: an operation its caller performs may be claimed now").check()
    page.get_by_label("Secret variable").fill(SECRET_ENV)
    page.get_by_role("button", name="Save", exact=True).click()

    expect(page.get_by_role("row").filter(has_text="n8n")).to_contain_text("set")
    assert Subscription.objects.get().events == ["operation.due"]


def test_a_machine_token_is_said_to_be_one_and_keeps_its_scopes_when_refused(page, workspace, token):
    """The tokens' list says how a token is issued and revoked (there is no Add here); a machine's
    token says it belongs to no person, and approve or no scope at all is refused in words."""
    make_user("root", is_staff=True, is_superuser=True)
    log_in(page, "root", path="/admin/login/")
    page.goto("/admin/ledger/apitoken/")
    expect(page.locator("#tokens-issued-by-command")).to_contain_text("manage.py token issue WORKSPACE --name NAME")
    row = page.get_by_role("row").filter(has_text=token[:8])
    expect(row).to_contain_text("a machine (no person behind it: it may never approve)")

    row.get_by_role("link").first.click()
    assert (
        page.get_by_text("claim, heartbeat and report the operations its caller performs").bounding_box()["height"] < 30
    )
    page.get_by_label("approve or reject (a person's token only)").check()
    page.get_by_role("button", name="Save", exact=True).click()
    expect(field_row(page, "scopes")).to_contain_text("Only a person's token can have the approve scope")

    for box in page.locator(".field-scopes input[type=checkbox]").all():
        box.uncheck()
    page.get_by_role("button", name="Save", exact=True).click()
    expect(field_row(page, "scopes")).to_contain_text("A token needs at least one scope.")
    screenshot(page, "admin-token-without-scopes")
    assert ApiToken.objects.get(hint=token[:8]).scopes == ["events", "claims", "read"]


def test_a_caller_actions_page_says_what_each_field_means(page, workspace, send_invoice_action):
    make_user("root", is_staff=True, is_superuser=True)
    log_in(page, "root", path="/admin/login/")
    page.goto("/admin/ledger/httpaction/")
    expect(page.get_by_role("row").filter(has_text="send-invoice")).to_contain_text("performed by the caller (claims)")
    page.get_by_role("link", name="send-invoice").click()

    expect(field_row(page, "performed_by")).to_contain_text(
        "the caller claims it over the API, acts itself and reports"
    )
    expect(field_row(page, "claim_lease_seconds")).to_contain_text("without an outcome by then it becomes unknown")
    expect(field_row(page, "service_level_seconds")).to_contain_text("at risk past 80 %, late past all of it")
    expect(field_row(page, "request")).to_contain_text("Empty ({}) for a caller's action.")
    expect(field_row(page, "lookup")).to_contain_text("Required for a caller's action")
    expect(field_row(page, "retry_schedule")).to_contain_text("(5 tries)")
    screenshot(page, "admin-caller-action")
