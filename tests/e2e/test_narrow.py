"""The 390 px layout: on a phone's width every console page fits (nothing widens the page past the
viewport: tables scroll inside themselves) and "Log out" stays on screen.

``PAGES`` lists every console page; a new page is one more line there.
"""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from ledger.intake.submit import submit_event
from ledger.models import Operation
from ledger.people import pause
from tests.conftest import R42
from tests.e2e.conftest import log_in, make_user, screenshot

pytestmark = pytest.mark.e2e

WIDTH, HEIGHT = 390, 844

# (name, path) of every page a member sees, the path formatted with the ids of ``crowded_demo``.
PAGES = [
    ("queue", "/console/"),
    ("queue-all", "/console/?state=all"),
    ("queue-held", "/console/?state=held"),
    ("operation", "/console/operations/{review}/"),
    ("operation-refund", "/console/operations/{refund}/"),
    ("operation-unknown", "/console/operations/{unknown}/"),
    ("approve-confirm", "/console/operations/{refund}/approve/"),
    ("controls", "/console/controls/"),
    ("audit", "/console/audit/"),
    ("service-levels", "/console/service-levels/"),
    ("mismatches", "/console/mismatches/"),
    ("not-found", "/console/operations/999999/"),
    ("dashboard", "/console/dashboard/"),
    ("conflicts", "/console/conflicts/"),
    ("failures", "/console/failures/"),
    ("deliveries", "/console/deliveries/"),
    ("find-several", "/console/find/?q=demo:R-"),
    ("find-nothing", "/console/find/?q=no-such-thing"),
    ("queue-oldest-first", "/console/?sort=oldest"),
    ("all-operations", "/console/operations/"),
    ("operation-from-the-queue", "/console/operations/{review}/?list=queue"),
]
# (name, path, who): pages someone else sees; no one: logged out.
OTHER_PAGES = [
    ("login", "/accounts/login/", None),
    ("403", "/console/operations/{refund}/approve/", "watcher"),
]


@pytest.fixture
def narrow(browser, live_server):
    context = browser.new_context(base_url=live_server.url, viewport={"width": WIDTH, "height": HEIGHT})
    context.set_default_timeout(10_000)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def crowded_demo(workspace):
    """Long keys, a long error, a refund awaiting approval, work held by a switch, late work."""
    review = submit_event(
        workspace=workspace,
        source="api",
        raw={"action": "prepare-brief", "data": R42 | {"request_id": "R-42-" + "renewal-options-" * 4}},
    ).operation
    Operation.objects.filter(pk=review.pk).update(
        state="needs_review",
        attempts=1,
        last_error_category="permanent",
        last_error_message="the owner ops is on leave until the end of the quarter; " * 3,
    )
    refund = submit_event(
        workspace=workspace,
        source="api",
        raw={
            "action": "issue-refund",
            "data": {
                "request_id": "R-7",
                "version": 1,
                "customer_id": "C-1001",
                "amount_cents": 2500,
                "currency": "EUR",
            },
        },
    ).operation
    unknown = submit_event(
        workspace=workspace,
        source="api",
        raw={
            "action": "send-notice",
            "data": {"request_id": "R-9", "version": 1, "summary": "Renewal notice", "owner": "ops"},
        },
    ).operation
    Operation.objects.filter(pk=unknown.pk).update(
        state="unknown", attempts=1, last_error_category="ambiguous", last_error_message="read timeout"
    )
    for number in range(5):
        late = submit_event(
            workspace=workspace,
            source="api",
            raw={"action": "prepare-brief", "data": R42 | {"request_id": f"R-{number}"}},
        ).operation
        Operation.objects.filter(pk=late.pk).update(created_at=timezone.now() - timedelta(minutes=20))
    # The same key with another title: an open conflict (the inbox, the deliveries page).
    submit_event(
        workspace=workspace,
        source="api",
        raw={
            "action": "prepare-brief",
            "data": R42
            | {"request_id": review.payload["request_id"], "title": "A much longer title than the one recorded " * 3},
        },
    )
    pause.set_paused(
        paused=True,
        actor="ops",
        reason="destination maintenance until 14:00",
        workspace=workspace,
        action="prepare-brief",
    )
    return {"review": review.pk, "refund": refund.pk, "unknown": unknown.pk}


def problems_at(page, name: str, *, logged_in: bool, viewport: int = WIDTH) -> list[str]:
    expect(page.locator("main")).to_be_visible()
    screenshot(page, f"narrow-{name}" if viewport == WIDTH else f"at-{viewport}-{name}")
    found = []
    width = page.evaluate("document.documentElement.scrollWidth")
    if width > viewport:
        found.append(f"{name}: the page is {width} px wide")
    if logged_in:
        log_out = page.get_by_role("button", name="Log out")
        box = log_out.bounding_box() if log_out.is_visible() else None
        if box is None or box["x"] < 0 or box["x"] + box["width"] > viewport:
            found.append(f"{name}: Log out is not on screen ({box})")
    return found


def test_every_console_page_fits_390_px(narrow, crowded_demo):
    make_user("admin", "admin", is_staff=True)  # staff: the top bar's longest (with Admin)
    make_user("watcher", "viewer")
    found = []

    for name, path, who in OTHER_PAGES:
        narrow.context.clear_cookies()
        if who:
            log_in(narrow, who)
        narrow.goto(path.format(**crowded_demo))
        found += problems_at(narrow, name, logged_in=bool(who))

    narrow.context.clear_cookies()
    log_in(narrow, "admin")
    for name, path in PAGES:
        narrow.goto(path.format(**crowded_demo))
        found += problems_at(narrow, name, logged_in=True)

    assert found == []


@pytest.mark.parametrize("viewport", [1024, 1280])
def test_the_top_bar_fits_a_laptops_width_too(browser, live_server, crowded_demo, viewport):
    """Eight pages, Admin and the Find box do not fit one line at a laptop's width: they wrap."""
    make_user("admin", "admin", is_staff=True)
    context = browser.new_context(base_url=live_server.url, viewport={"width": viewport, "height": 800})
    page = context.new_page()
    try:
        log_in(page, "admin")
        found = []
        for name, path in [("queue", "/console/"), ("dashboard", "/console/dashboard/")]:
            page.goto(path)
            found += problems_at(page, name, logged_in=True, viewport=viewport)
    finally:
        context.close()
    assert found == []


def test_a_wide_table_scrolls_inside_itself(narrow, crowded_demo):
    make_user("admin", "admin")
    log_in(narrow, "admin")
    narrow.goto("/console/audit/")

    table = narrow.locator("main table").first
    scroll, client = table.evaluate("t => [t.scrollWidth, t.clientWidth]")
    assert scroll > client  # wider than the screen: it scrolls, the page does not
    assert narrow.evaluate("document.documentElement.scrollWidth") <= WIDTH


def on_screen(page, locator) -> bool:
    """Whether ``locator`` is within the first screen, across and down."""
    box = locator.bounding_box()
    return box is not None and box["x"] >= 0 and box["x"] + box["width"] <= WIDTH and box["y"] + box["height"] <= HEIGHT


def test_below_600_px_each_row_is_a_card_with_state_summary_and_last_error_first(narrow, crowded_demo):
    """The first row's State, summary and Last error are on the first screen, not two screens down
    or off to the right."""
    make_user("operator", "operator")
    log_in(narrow, "operator")
    narrow.goto("/console/?state=needs_review")

    card = narrow.locator("table.work-list tbody tr").first
    for cell in ["td.summary", "td.state", "td.error"]:
        expect(card.locator(cell)).to_be_visible()
        assert on_screen(narrow, card.locator(cell)), cell
    expect(card.locator("td.state")).to_have_text("Needs review")
    expect(card.locator("td.error")).to_contain_text("the owner ops is on leave")
    summary, error = card.locator("td.summary").bounding_box(), card.locator("td.error").bounding_box()
    assert summary["y"] < error["y"]  # stacked, the summary first
    assert narrow.evaluate("document.documentElement.scrollWidth") <= WIDTH
    screenshot(narrow, "narrow-queue")


def test_below_600_px_the_state_tabs_are_one_line_showing_the_current_one(narrow, crowded_demo):
    make_user("operator", "operator")
    log_in(narrow, "operator")
    narrow.goto("/console/?state=held")

    tabs = narrow.locator(".state-tabs a")
    assert len({round(box["y"]) for box in tabs.evaluate_all("as => as.map(a => a.getBoundingClientRect())")}) == 1
    current = narrow.locator(".state-tabs a[aria-current='page']")
    expect(current).to_contain_text("Held")
    assert on_screen(narrow, current)
    assert narrow.evaluate("document.documentElement.scrollWidth") <= WIDTH


def test_below_600_px_a_conflicts_differences_come_first(narrow, crowded_demo):
    make_user("operator", "operator")
    log_in(narrow, "operator")
    narrow.goto("/console/conflicts/")

    row = narrow.locator("table.conflict-list tbody tr").first
    differences = row.locator("td.differences")
    expect(differences).to_contain_text("Title")
    screenshot(narrow, "narrow-conflicts-crowded")
    assert differences.bounding_box()["y"] < row.locator("td.key").bounding_box()["y"]
    textarea = row.locator("textarea")
    if textarea.count():
        assert differences.bounding_box()["y"] < textarea.bounding_box()["y"]
    assert on_screen(narrow, differences.locator("li").first)
    assert narrow.evaluate("document.documentElement.scrollWidth") <= WIDTH
