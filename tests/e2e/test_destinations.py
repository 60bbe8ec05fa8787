"""An operator sees a destination in trouble: the dashboard's Destinations panel shows helpdesk's
breaker open (json-server answered 503 twice in a row to a configured action), and the operation it
holds says it waits, and until when."""

import pytest
from playwright.sync_api import expect

from tests import third_party
from tests.console.test_destinations import opened_breaker
from tests.e2e.conftest import OPERATOR, log_in, make_user, screenshot

pytestmark = [pytest.mark.e2e, third_party.needs_node]


def test_a_paused_destination_is_in_plain_sight(page, workspace, json_server, configured):
    make_user("operator", OPERATOR)
    _, held = opened_breaker(workspace, json_server, configured)

    log_in(page, "operator")
    page.get_by_role("link", name="Dashboard").first.click()
    row = page.locator("#destination-helpdesk")
    expect(row).to_contain_text("open")
    expect(row).to_contain_text("calls paused until")
    expect(row).to_contain_text("after 2 failures in a row, calls pause for 60 s, then one probe call")
    row.scroll_into_view_if_needed()
    screenshot(page, "dashboard-destinations")

    page.goto(f"/console/operations/{held.pk}/")
    waiting = page.get_by_role("status").filter(has_text="Waiting: calls to helpdesk paused until")
    expect(waiting).to_be_visible()
    expect(waiting).to_contain_text("after 2 transient failures in a row (circuit breaker)")
    screenshot(page, "operation-waiting")
