"""Times people can read: a person whose browser is in Berlin reads a failed lookup's next
lookup and give-up times in Berlin's time, on the operation page's audit trail beside the banner that
says the same, and on the audit page; no "UTC" left in the words."""

import re
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.conf import settings
from django.utils import timezone
from playwright.sync_api import expect

from ledger.engine.processing import process_due_operations
from ledger.models import AuditEvent, Operation
from ledger.outcomes import AmbiguousError, CannotTell
from reconciliation.reconcile import reconcile_operation
from tests.e2e.conftest import OPERATOR, log_in, make_user, screenshot
from tests.ledger.conftest import scripted_action, submit  # noqa: F401

pytestmark = pytest.mark.e2e

BERLIN = ZoneInfo("Europe/Berlin")


def in_berlin(moment) -> str:
    local = moment.astimezone(BERLIN)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}"


@pytest.fixture
def failed_lookup(workspace, scripted_action) -> Operation:  # noqa: F811
    """An external try that may have landed, then a lookup that could not tell: asked again later."""
    action = scripted_action(name="send-reminder", external=True, settle_after=timedelta(seconds=10))
    action.destination.answer(AmbiguousError("read timeout"))
    action.lookup = lambda operation: CannotTell("HTTP 503 from the destination")
    operation = submit(workspace, action.name, request_id="R-7")
    process_due_operations(worker="w1")
    operation.refresh_from_db()
    assert reconcile_operation(operation, now=timezone.now() + timedelta(seconds=20)) == "cannot_tell"
    operation.refresh_from_db()
    return operation


def test_a_person_in_berlin_reads_a_lookups_times_in_berlin_time(browser, live_server, workspace, failed_lookup):
    make_user("operator", OPERATOR)
    event = AuditEvent.objects.get(kind="lookup_failed")
    next_lookup = in_berlin(failed_lookup.next_attempt_at)
    give_up = in_berlin(
        failed_lookup.attempt_rows.get().started_at + timedelta(seconds=settings.OPSCONSOLE_RECONCILE_GIVE_UP_SECONDS)
    )
    assert next_lookup.endswith((" CET", " CEST"))
    context = browser.new_context(
        base_url=live_server.url, timezone_id="Europe/Berlin", viewport={"width": 1280, "height": 1000}
    )
    context.set_default_timeout(10_000)
    page = context.new_page()
    try:
        log_in(page, "operator")
        page.goto(f"/console/operations/{failed_lookup.pk}/")

        row = page.get_by_role("row").filter(has_text="lookup_failed")
        expect(row).to_contain_text(f"next lookup at {next_lookup}, gives up at {give_up}")
        expect(row).not_to_contain_text("UTC")
        expect(row.locator("time").first).to_have_attribute("datetime", re.compile(r"\+0[12]:00$"))
        # The banner above says the same times, from the operation's own fields.
        banner = page.get_by_role("status").filter(has_text="The last try may have reached")
        expect(banner).to_contain_text(f"next lookup at {next_lookup}; it keeps asking until {give_up}")
        screenshot(page, "times-operation-in-berlin")

        page.goto("/console/audit/?kind=lookup_failed")
        audit_row = page.get_by_role("row").filter(has_text="lookup_failed")
        expect(audit_row).to_contain_text(f"next lookup at {next_lookup}, gives up at {give_up}")
        expect(audit_row.locator("td.when")).to_have_text(in_berlin(event.created_at))
        screenshot(page, "times-audit-in-berlin")
    finally:
        context.close()
