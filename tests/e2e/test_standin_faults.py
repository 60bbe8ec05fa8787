"""The console says when the stand-in destination holds scripted faults (the demo day's, a test's):
a line on the dashboard and on the page of an operation that calls it, naming how to drop them;
nothing once they are cleared, nothing when the console is not told to ask, and nothing, quickly,
when the stand-in does not answer."""

import time

import pytest
from playwright.sync_api import expect

from ledger.intake.submit import submit_event
from ledger.models import Operation
from opsconsole.console import standin_faults
from tests.conftest import event, external_event
from tests.e2e.conftest import OPERATOR, log_in, make_user, screenshot

pytestmark = pytest.mark.e2e

LINE = "The stand-in destination has 3 scripted failures queued (2 for calls, 1 for lookups)"


@pytest.fixture
def operator(db):
    return make_user("operator", OPERATOR)


@pytest.fixture
def scripted(standin, settings):
    settings.OPSCONSOLE_SHOW_STANDIN_FAULTS = True
    standin.fail_next({"kind": "status", "status": 503}, {"kind": "reset_before"})
    standin.fail_next_lookup({"kind": "status", "status": 503})
    return standin


def test_the_dashboard_and_an_operation_that_calls_the_standin_say_so(page, workspace, operator, scripted):
    notice = submit_event(workspace=workspace, raw=external_event("send-notice"), source="api").operation
    brief = submit_event(workspace=workspace, raw=event(), source="api").operation
    log_in(page, "operator")

    page.goto("/console/dashboard/")
    line = page.locator("[data-figure=standin-faults]")
    expect(line).to_contain_text(LINE)
    expect(line).to_contain_text(f"curl -X POST {scripted.url}/_faults/clear")
    screenshot(page, "standin-faults-dashboard")

    page.goto(f"/console/operations/{notice.pk}/")
    expect(page.locator("[data-figure=standin-faults]")).to_contain_text("its next calls fail as scripted")
    screenshot(page, "standin-faults-operation")
    page.goto(f"/console/operations/{brief.pk}/")  # an internal action: the stand-in is none of its business
    expect(page.locator("h1")).to_have_text(brief.key)
    expect(page.locator("[data-figure=standin-faults]")).to_have_count(0)

    scripted.http.post("/_faults/clear").raise_for_status()
    page.goto("/console/dashboard/")
    expect(page.locator("h1")).to_have_text("Dashboard")
    expect(page.locator("[data-figure=standin-faults]")).to_have_count(0)
    assert Operation.objects.count() == 2


def test_nothing_is_asked_unless_the_console_is_told_to(page, workspace, operator, scripted, settings):
    settings.OPSCONSOLE_SHOW_STANDIN_FAULTS = False
    before = scripted.requests("GET /_faults/count")
    log_in(page, "operator")

    page.goto("/console/dashboard/")

    expect(page.locator("h1")).to_have_text("Dashboard")
    expect(page.locator("[data-figure=standin-faults]")).to_have_count(0)
    assert scripted.requests("GET /_faults/count") == before


def test_a_standin_that_does_not_answer_shows_nothing_and_costs_little(settings):
    settings.OPSCONSOLE_SHOW_STANDIN_FAULTS = True
    settings.OPSCONSOLE_STANDIN_URL = "http://127.0.0.1:1"  # nothing listens
    began = time.monotonic()

    assert standin_faults.queued() is None
    assert time.monotonic() - began < 2 * standin_faults.TIMEOUT_SECONDS + 1
