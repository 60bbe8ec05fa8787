"""An operator opens the dashboard: the day's figures at a glance, the charts and their tables, and
the page refreshing itself as work arrives and finishes, counted live, before the sweep samples it;
each figure says how old it is; at 390 px wide nothing leaves the screen."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

import ledger.tasks  # noqa: F401  (ledger.processing imports it first: a circular import otherwise)
from ledger.engine.processing import process_due_operations
from ledger.outcomes import PermanentError
from ledger.reads import dashboard
from opsconsole.console import dashboard as dashboard_view
from tests.e2e.conftest import OPERATOR, log_in, make_user, screenshot
from tests.ledger.conftest import START, scripted_action, submit  # noqa: F401

pytestmark = pytest.mark.e2e

# (hours ago, operations that succeed, that fail for good)
DAY = [(20, 4, 0), (14, 9, 1), (9, 6, 0), (5, 12, 3), (2, 7, 1), (1, 3, 0)]


@pytest.fixture
def a_day(workspace, scripted_action, time_machine):  # noqa: F811
    """A day of work in "demo", sampled by the sweep as it went (every few hours here)."""
    action = scripted_action(name="file-report")
    now = _just_after_an_hour_began()
    for hours_ago, succeed, fail in DAY:
        time_machine.move_to(now - timedelta(hours=hours_ago), tick=False)
        action.destination.answer(*[PermanentError("owner does not exist")] * fail)
        for number in range(succeed + fail):
            submit(workspace, action.name, request_id=f"R-{hours_ago}-{number}")
        process_due_operations(worker="w1", limit=100)
        time_machine.move_to(now - timedelta(hours=hours_ago) + timedelta(minutes=10), tick=False)
        while dashboard.take_samples() not in (None, timezone.now() - dashboard.SETTLE):
            pass
    time_machine.move_to(now - timedelta(minutes=3), tick=False)  # the sweep's last sample, 3 min ago
    while dashboard.take_samples() not in (None, timezone.now() - dashboard.SETTLE):
        pass
    time_machine.move_to(now, tick=True)
    return action


def _just_after_an_hour_began():
    """40 s into an hour: the hour's table then holds its widest ages ("live from 20:57" in the hour
    before), which once pushed the narrow screen's table past its edge at 21:00. A fixed hour in the
    middle of a month, after the workspace's first event: a chain's events never go back a month
    (ledger.core.audit_mac.seal), so a day that crossed the start of one would not be this day."""
    return START + timedelta(seconds=40)


def test_the_dashboard_shows_the_day_and_refreshes_itself(page, workspace, a_day, monkeypatch):
    make_user("operator", OPERATOR)
    monkeypatch.setattr(dashboard_view, "REFRESH_SECONDS", 1)
    refreshes = []
    page.on(
        "request",
        lambda request: refreshes.append(request.url) if request.headers.get("hx-request") == "true" else None,
    )

    log_in(page, "operator")
    page.get_by_role("link", name="Dashboard").click()
    expect(page.get_by_role("heading", name="Dashboard", exact=True)).to_be_visible()
    finished, failed = sum(row[1] for row in DAY), sum(row[2] for row in DAY)
    expect(page.locator("#state-succeeded [data-column=day]")).to_have_text(str(finished))
    expect(page.locator("#state-needs_review [data-column=now]")).to_have_text(str(failed))
    expect(page.get_by_role("heading", name="Waiting now live")).to_be_visible()
    expect(page.locator('[data-figure="throughput"]')).to_contain_text(f"{finished} finished in 24 h")
    expect(page.locator('[data-figure="backlog"]')).to_have_text(str(failed))
    rate = f"{100 * failed / (finished + failed):.1f} %"
    expect(page.locator("#failures-by-action").get_by_role("row", name="file-report")).to_contain_text(rate)
    expect(page.locator("#failures-by-destination").get_by_role("row", name="internal")).to_contain_text(rate)
    expect(page.get_by_role("img", name="Operations finished per hour, last 24 hours")).to_be_visible()
    expect(page.locator("#throughput-chart rect.bar")).to_have_count(len(DAY))

    page.get_by_text("The hours as a table").click()
    expect(page.locator("#hours-table tbody tr")).to_have_count(24)
    expect(page.locator("#hours-table tbody tr").last.locator(".age")).to_have_text("live")
    expect(page.locator("#hours-table tbody tr").first.locator(".age")).to_have_text("sampled 3 min ago")
    expect(page.locator("#hours-table caption")).to_contain_text("the rest: the sweep's samples, sampled 3 min ago")

    # An incident while the page is open, minutes after the sweep's last sample: the fragment,
    # refreshed by htmx, counts it live at once; the sweep will not sample for minutes yet.
    a_day.destination.answer(*[PermanentError("owner does not exist")] * 4)
    for number in range(20):
        submit(workspace, a_day.name, request_id=f"R-incident-{number}")
    process_due_operations(worker="w1", limit=100)
    submit(workspace, a_day.name, request_id="R-new")
    expect(page.locator('[data-figure="backlog"]')).to_have_text(str(failed + 4 + 1), timeout=10_000)
    expect(page.locator("#state-pending [data-column=now]")).to_have_text("1")
    expect(page.locator("#state-succeeded [data-column=day]")).to_have_text(str(finished + 16))
    expect(page.locator("#state-succeeded [data-column=live]")).to_have_text("16")
    expect(page.locator('[data-figure="failures"]')).to_contain_text(f"{failed + 4} of {finished + failed + 20}")
    assert refreshes
    assert all("/console/dashboard/" in url for url in refreshes)
    expect(page.locator("#hours-table")).to_have_attribute("open", "")  # kept open across the refresh
    screenshot(page, "dashboard")

    # The narrow screen, with the page's usual refresh: a fragment swapped in every second could land
    # between the click below and the measure (seen on a loaded machine).
    monkeypatch.setattr(dashboard_view, "REFRESH_SECONDS", 60)
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    expect(page.get_by_role("heading", name="Dashboard", exact=True)).to_be_visible()
    screenshot(page, "dashboard-390")
    page.get_by_text("The hours as a table").click()
    screenshot(page, "dashboard-390-table")
    # The dashboard's own content stays within the screen, inside the page's margins (no table
    # needs its scroll bar); the top bar's layout is the base template's, shared by every page.
    beyond = page.evaluate("""() => {
        const main = document.querySelector("main"), edge = main.getBoundingClientRect().right
            - parseFloat(getComputedStyle(main).paddingRight);
        return Array.from(main.querySelectorAll("*")).filter(e => e.getBoundingClientRect().right > edge + 0.5)
            .map(e => e.outerHTML.slice(0, 80));
    }""")
    assert beyond == []
    chart = page.locator("#throughput-chart").bounding_box()
    assert chart["x"] >= 0
    assert chart["x"] + chart["width"] <= 390
