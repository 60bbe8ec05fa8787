"""Tables as a person uses them: the queue sorted oldest first with its per-state counts, exported
as CSV from the browser (masked for an operator, shown to an approver), and times in the
browser's own time zone."""

import csv
import io
import re
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from ledger.core.privacy import MASK
from ledger.intake.submit import submit_event
from ledger.models import Operation
from tests.e2e.conftest import APPROVER, OPERATOR, log_in, make_user, screenshot
from tests.ledger.conftest import submit_brief

pytestmark = pytest.mark.e2e


def refund(workspace, number: int) -> Operation:
    data = {
        "request_id": f"R-{number}",
        "version": 1,
        "customer_id": f"C-{1000 + number}",
        # Seven digits: a sensitive value the log guard looks for, which no counter or id in a log line
        # of the run reaches by chance (100 did: "Enqueued [opsconsole] 100").
        "amount_cents": 1_000_017 + 100 * number,
        "currency": "EUR",
    }
    return submit_event(workspace=workspace, source="api", raw={"action": "issue-refund", "data": data}).operation


@pytest.fixture
def refunds(workspace):
    """60 refunds awaiting approval, R-0 the one that arrived first (and the one changed last), and
    two briefs that need review."""
    start = timezone.now() - timedelta(days=2)
    made = [refund(workspace, number) for number in range(60)]
    for number, operation in enumerate(made):
        Operation.objects.filter(pk=operation.pk).update(
            created_at=start + timedelta(minutes=number), updated_at=start + timedelta(hours=3, minutes=-number)
        )
    for number in range(2):
        brief = submit_brief(workspace, request_id=f"B-{number}")
        Operation.objects.filter(pk=brief.pk).update(
            state="needs_review", last_error_category="permanent", last_error_message="owner is on leave"
        )
    return made


def body_rows(page):
    return page.get_by_role("row").filter(has_not=page.get_by_role("columnheader"))


def download_csv(page) -> tuple[str, list[dict]]:
    with page.expect_download() as caught:
        page.get_by_role("link", name="Export CSV").click()
    download = caught.value
    with open(download.path(), encoding="utf-8", newline="") as file:
        return download.suggested_filename, list(csv.DictReader(io.StringIO(file.read())))


def test_exporting_the_queue_as_csv(page, workspace, refunds):
    make_user("operator", OPERATOR)
    make_user("approver", APPROVER)

    log_in(page, "operator")
    page.goto("/console/?state=pending_approval&action=issue-refund")
    awaiting = page.get_by_role("link", name=re.compile(r"^Awaiting approval 60"))
    expect(awaiting).to_have_attribute("aria-current", "page")
    # The counts keep the other filters: no refund needs review.
    expect(page.get_by_role("link", name=re.compile(r"^Needs review 0"))).to_be_visible()
    page.get_by_role("link", name="Arrived").click()  # newest first
    page.get_by_role("link", name=re.compile("^Arrived")).click()  # then oldest first
    expect(page).to_have_url(re.compile(r"sort=oldest"))
    expect(page.get_by_role("columnheader", name=re.compile("^Arrived"))).to_have_attribute("aria-sort", "ascending")
    expect(body_rows(page).first).to_contain_text("demo:R-0:v1:issue-refund")
    screenshot(page, "tables-queue-sorted-with-counts")

    name, rows = download_csv(page)
    assert name == f"queue-{timezone.now():%Y-%m-%d}-UTC.csv"
    assert [row["key"] for row in rows] == [f"demo:R-{number}:v1:issue-refund" for number in range(60)]
    assert {row["payload.customer_id"] for row in rows} == {MASK}
    assert {row["payload.amount_cents"] for row in rows} == {MASK}
    assert rows[0]["payload.currency"] == "EUR"
    assert rows[0]["state"] == "pending_approval"
    page.get_by_role("button", name="Log out").click()

    log_in(page, "approver")
    page.goto("/console/?state=pending_approval&sort=oldest")
    _, rows = download_csv(page)
    assert (rows[0]["payload.customer_id"], rows[0]["payload.amount_cents"]) == ("C-1000", "1000017")
    assert rows[59]["payload.customer_id"] == "C-1059"


def test_exporting_the_audit_search(page, workspace, refunds):
    make_user("operator", OPERATOR)
    log_in(page, "operator")
    page.goto("/console/audit/")
    page.get_by_label("Key or request id").fill("R-7")
    page.get_by_role("button", name="Filter").click()
    screenshot(page, "tables-audit-filtered")

    name, rows = download_csv(page)

    assert name == f"audit-{timezone.now():%Y-%m-%d}-UTC.csv"
    assert rows
    assert {row["operation"] for row in rows} == {"demo:R-7:v1:issue-refund"}
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+\+00:00", row["created_at (UTC)"]) for row in rows)


def test_times_show_in_the_browsers_zone(browser, live_server, workspace, refunds):
    make_user("operator", OPERATOR)
    oldest = refunds[0]  # arrived two days ago: in winter, CET
    context = browser.new_context(
        base_url=live_server.url, timezone_id="Europe/Berlin", viewport={"width": 1280, "height": 900}
    )
    context.set_default_timeout(10_000)
    page = context.new_page()
    try:
        log_in(page, "operator")
        assert {"name": "tz", "value": "Europe/Berlin"}.items() <= next(
            cookie for cookie in context.cookies() if cookie["name"] == "tz"
        ).items()
        page.goto(f"/console/operations/{oldest.pk}/")
        berlin = Operation.objects.get(pk=oldest.pk).created_at.astimezone(ZoneInfo("Europe/Berlin"))
        arrived = page.locator("dt", has_text=re.compile("^Created$")).locator("xpath=following-sibling::dd[1]")
        expect(arrived).to_have_text(f"{berlin:%Y-%m-%d %H:%M:%S} CET")
        page.goto("/console/audit/")
        expect(page.get_by_text("Dates are days in your time zone, Europe/Berlin.")).to_be_visible()
        expect(page.locator("td.when time").first).to_have_text(re.compile(r" CET$"))
        screenshot(page, "tables-audit-in-berlin")
    finally:
        context.close()
