"""The queue as a work list (issue 27, item 7), as a person sees it at a desktop's width: a summary
per row, states in words, one line per row."""

import pytest
from playwright.sync_api import expect

from ledger.intake.submit import submit_event
from ledger.models import Operation
from tests.e2e.conftest import OPERATOR, log_in, make_user, screenshot

pytestmark = pytest.mark.e2e

WIDE = {"width": 1440, "height": 900}
TITLES = ["Review renewal options", "Prepare the quarterly board pack for the northern region", "Check the lease"]
ERRORS = [
    ("permanent", "HTTP 400 from helpdesk: owner_unknown: the owner ops is on leave until the end of the quarter"),
    ("transient", "HTTP 503 from helpdesk: try again later"),
]


def brief(workspace, number: int) -> Operation:
    data = {"request_id": f"R-{40 + number}", "version": 3, "title": TITLES[number % 3], "owner": "ops"}
    return submit_event(workspace=workspace, source="api", raw={"action": "prepare-brief", "data": data}).operation


@pytest.fixture
def work(workspace):
    """30 briefs that need review, with long titles and long errors; a refund awaiting approval."""
    operations = [brief(workspace, number) for number in range(30)]
    for number, operation in enumerate(operations):
        category, message = ERRORS[number % 2]
        Operation.objects.filter(pk=operation.pk).update(
            state="needs_review", attempts=1 + number % 5, last_error_category=category, last_error_message=message
        )
    refund = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}
    submit_event(workspace=workspace, source="api", raw={"action": "issue-refund", "data": refund})
    return operations


@pytest.fixture
def wide(browser, live_server):
    context = browser.new_context(base_url=live_server.url, viewport=WIDE)
    context.set_default_timeout(10_000)
    yield context.new_page()
    context.close()


def test_at_1440_px_each_row_is_one_line_with_its_summary(wide, work):
    make_user("operator", OPERATOR)
    log_in(wide, "operator")
    wide.goto("/console/?state=all")

    rows = wide.locator("table.work-list tbody tr")
    expect(rows).to_have_count(31)
    screenshot(wide, "queue")
    first = rows.filter(has_text="R-69 v3")
    expect(first).to_contain_text("Needs review")
    expect(first.locator("td.summary")).to_have_text("R-69 v3 · Check the lease")
    expect(rows.filter(has_text="refund in EUR")).to_contain_text("Awaiting approval")
    expect(wide.locator("table.work-list")).not_to_contain_text("C-1001")
    heights = {round(box["height"]) for box in rows.evaluate_all("rows => rows.map(r => r.getBoundingClientRect())")}
    assert max(heights) <= 40, heights  # one line of text: no cell wraps
    assert wide.evaluate("document.documentElement.scrollWidth") <= WIDE["width"]
