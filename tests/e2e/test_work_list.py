"""The queue as a work list, as a person sees it at a desktop's width: a summary
per row, states in words, one line per row."""

import pytest
from playwright.sync_api import expect

from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, BulkAction, Operation
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
    # The action bar is above the list, not below it.
    assert wide.locator("#bulk-selection").bounding_box()["y"] < wide.locator("table.work-list").bounding_box()["y"]
    screenshot(wide, "work-list")  # docs/console/queue.png


def test_the_queue_filters_by_how_the_destination_refused(wide, work):
    make_user("operator", OPERATOR)
    log_in(wide, "operator")
    wide.goto("/console/")
    wide.get_by_label("Last error").select_option("permanent")
    wide.get_by_role("button", name="Filter").click()
    expect(wide.locator(".count")).to_have_text("15 operations")
    expect(wide.locator("table.work-list tbody tr")).to_have_count(15)
    expect(wide.get_by_text("matching")).to_have_count(0)  # one page shows them all: nothing more to select


def test_select_all_matching_reaches_past_the_page(wide, workspace):
    operations = [brief(workspace, number) for number in range(55)]
    Operation.objects.filter(pk__in=[op.pk for op in operations]).update(
        state="needs_review", last_error_category="permanent", last_error_message="HTTP 400: owner_unknown"
    )
    make_user("operator", OPERATOR)
    log_in(wide, "operator")
    wide.goto("/console/?category=permanent")
    expect(wide.locator("table.work-list tbody tr")).to_have_count(50)

    wide.get_by_label("Select all 55 matching").check()
    expect(wide.get_by_label("Select all on this page")).to_be_checked()
    wide.get_by_label("Reason").fill("the owner left; nothing to brief")
    screenshot(wide, "queue-select-all")
    with wide.expect_navigation():
        wide.get_by_role("button", name="Cancel selected").click()

    expect(wide.locator("#bulk-progress")).to_contain_text("0/55")
    assert sorted(BulkAction.objects.get().operation_ids) == sorted(op.pk for op in operations)


def test_all_operations_lists_finished_work(wide, work):
    Operation.objects.filter(pk__in=[op.pk for op in work[:10]]).update(
        state="succeeded", last_error_category="", last_error_message=""
    )
    make_user("operator", OPERATOR)
    log_in(wide, "operator")
    wide.get_by_role("link", name="All operations", exact=True).click()

    expect(wide.get_by_role("heading", name="All operations")).to_be_visible()
    expect(wide.locator("table.work-list tbody tr").filter(has_text="Succeeded")).to_have_count(10)
    wide.get_by_label("State").select_option("succeeded")
    wide.get_by_role("button", name="Filter").click()
    expect(wide.locator("table.work-list tbody tr")).to_have_count(10)
    screenshot(wide, "all-operations")


def test_taking_an_operation_shows_to_everyone_and_taking_it_over_is_explicit(wide, work, browser, live_server):
    make_user("operator", OPERATOR)
    make_user("bob", OPERATOR)
    first = work[-1]
    log_in(wide, "operator")
    wide.goto("/console/?state=needs_review")
    wide.get_by_role("button", name=f"Take {first.key}").click()

    row = wide.locator("table.work-list tbody tr").filter(has=wide.get_by_role("link", name=first.key))
    expect(row.locator("td.taken")).to_have_text("you")
    wide.get_by_label("Taken", exact=True).select_option("mine")
    wide.get_by_role("button", name="Filter").click()
    expect(wide.locator("table.work-list tbody tr")).to_have_count(1)

    other = browser.new_context(base_url=live_server.url, viewport=WIDE).new_page()
    try:
        log_in(other, "bob")
        other.goto(f"/console/operations/{first.pk}/")
        expect(other.locator(".assignment")).to_contain_text("Taken by operator")
        screenshot(other, "operation-taken")
        other.get_by_role("button", name="Take over from operator").click()
        expect(other.locator(".assignment")).to_contain_text("You took this operation")
    finally:
        other.context.close()
    assert AuditEvent.objects.filter(operation=first, kind="taken_over", actor="bob").exists()


def test_finished_work_offers_no_take(wide, work):
    make_user("operator", OPERATOR)
    done, open_one = work[0], work[1]
    Operation.objects.filter(pk=done.pk).update(state="succeeded", last_error_category="", last_error_message="")
    log_in(wide, "operator")

    wide.goto("/console/operations/")
    expect(wide.get_by_role("button", name=f"Take {open_one.key}")).to_be_visible()
    expect(wide.get_by_role("button", name=f"Take {done.key}")).to_have_count(0)
    wide.goto(f"/console/operations/{done.pk}/")
    screenshot(wide, "operation-finished-no-take")

    expect(wide.locator(".assignment").get_by_role("button", name="Take")).to_have_count(0)


def test_next_and_previous_step_through_the_filtered_list(wide, work):
    make_user("operator", OPERATOR)
    log_in(wide, "operator")
    wide.goto("/console/?category=transient&sort=oldest")
    keys = wide.locator("table.work-list td.key a").all_inner_texts()
    assert len(keys) == 15

    wide.get_by_role("link", name=keys[1]).click()
    expect(wide.get_by_role("heading", level=1)).to_have_text(keys[1])
    wide.get_by_role("link", name="Next ›").click()
    expect(wide.get_by_role("heading", level=1)).to_have_text(keys[2])
    screenshot(wide, "operation-next-previous")
    wide.get_by_role("link", name="‹ Previous").click()
    wide.get_by_role("link", name="‹ Previous").click()
    expect(wide.get_by_role("heading", level=1)).to_have_text(keys[0])
    expect(wide.get_by_text("First in the list")).to_be_visible()
    wide.get_by_role("link", name="Back to the list").click()
    expect(wide.get_by_label("Last error")).to_have_value("transient")


@pytest.mark.parametrize("width", [1100, 1280])
def test_at_a_laptops_width_the_last_error_keeps_room_and_no_header_runs_into_the_next(
    browser, live_server, work, width
):
    context = browser.new_context(base_url=live_server.url, viewport={"width": width, "height": 900})
    page = context.new_page()
    try:
        make_user("operator", OPERATOR)
        log_in(page, "operator")
        page.goto("/console/?state=all")
        headers = page.locator("table.work-list thead th").evaluate_all(
            "ths => ths.map(th => [th.textContent.trim(), th.clientWidth, th.scrollWidth])"
        )
        assert [name for name, shown, needed in headers if needed > shown] == [], headers
        error = page.locator("table.work-list tbody td.error").filter(has_text="HTTP").first
        assert error.bounding_box()["width"] >= 90
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        screenshot(page, f"queue-at-{width}")
    finally:
        context.close()
