"""The console read at a desk (1440 px) and on a phone (390 px) after a day of the demo's: the queue's
last error says status and the destination's code, badges stay in their cells, the dashboard names
every destination once."""

import os

import pytest
from playwright.sync_api import expect

from ledger.models import Operation
from tests.day import a_full_day  # noqa: F401  the fixture
from tests.e2e.conftest import PASSWORD, SHOTS, screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("a_full_day")]

DESK = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def operator_at(browser, live_server, django_user_model):
    """A browser signed in as the day's operator, at a viewport's size."""
    user = django_user_model.objects.get(username="operator")
    user.set_password(PASSWORD)
    user.save()
    contexts = []

    def at(viewport, username="operator"):
        context = browser.new_context(base_url=live_server.url, viewport=viewport)
        context.set_default_timeout(10_000)
        contexts.append(context)
        page = context.new_page()
        page.goto("/accounts/login/")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(PASSWORD)
        with page.expect_navigation():
            page.get_by_role("button", name="Log in").click()
        return page

    yield at
    for context in contexts:
        context.close()


# Each element's own box inside its cell's: nothing drawn over the next column.
OVERFLOWING = """cells => cells.filter(cell => {
  const inner = cell.querySelector('.badge, .error-head');
  if (!inner) return false;
  const a = inner.getBoundingClientRect(), b = cell.getBoundingClientRect();
  return a.right > b.right + 0.5 || a.width > inner.parentElement.getBoundingClientRect().width + 0.5;
}).map(cell => cell.innerText)"""


def test_at_a_desk_the_queue_shows_each_refusal_its_status_and_code(operator_at):
    page = operator_at(DESK)
    page.goto("/console/?state=all")

    heads = page.locator("table.work-list td.error .error-head")
    expect(heads.first).to_be_visible()
    for head in heads.all():
        assert head.inner_text().startswith("HTTP 4"), head.inner_text()
        # Whole, not cut: its box ends inside the line that cuts what does not fit.
        ends = head.evaluate("e => [e.getBoundingClientRect().right, e.parentElement.getBoundingClientRect().right]")
        assert ends[0] <= ends[1], (head.inner_text(), ends)
    cells = page.locator("table.work-list td.state, table.work-list td.error")
    assert cells.evaluate_all(OVERFLOWING) == []
    welcomes = page.locator("table.work-list td.summary", has_text="Welcome in").all_inner_texts()
    assert len(set(welcomes)) == len(welcomes) >= 2, welcomes
    screenshot(page, "queue")  # docs/console/queue.png


def test_on_a_laptop_the_state_badges_stay_in_their_cells(operator_at):
    page = operator_at({"width": 1280, "height": 800})
    page.goto("/console/?state=all")

    expect(page.locator("table.work-list td.state .badge").first).to_be_visible()
    assert page.locator("table.work-list td.state").evaluate_all(OVERFLOWING) == []


def test_the_admin_reads_states_and_times_as_the_console(operator_at, django_user_model):
    django_user_model.objects.filter(username="admin").update(
        password=django_user_model.objects.get(username="operator").password
    )
    page = operator_at(DESK, username="admin")
    page.goto("/admin/ledger/operation/")

    expect(page.locator("#result_list")).to_contain_text("Outcome unknown")
    expect(page.locator("#result_list")).not_to_contain_text("a.m.")
    expect(page.locator("#result_list")).not_to_contain_text("p.m.")
    screenshot(page, "admin-operations")
    screen(page, "admin-operations-screen")


def test_at_a_desk_the_dashboard_names_every_destination_once(operator_at):
    page = operator_at(DESK)
    page.goto("/console/dashboard/")

    rows = page.locator("#destinations tbody th")
    expect(rows).to_have_text(["fulfilment", "invoicing", "stand-in", "subscribers' receivers"])
    expect(page.locator("#failures-by-destination")).to_contain_text("stand-in")
    expect(page.locator("main")).not_to_contain_text("http://")
    screenshot(page, "dashboard")  # docs/console/dashboard.png


# The words of prose (letters only, four or more) drawn over two lines: a word broken mid-word. Keys,
# addresses and ids (with ":", "/", "." or "_" in them) may break where they must.
WORDS_BROKEN = """() => {
  const broken = [];
  const walker = document.createTreeWalker(document.querySelector('main'), NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest('code, pre, .key, h1, script, style')) continue;
    const style = getComputedStyle(node.parentElement);
    if (style.display === 'none' || style.visibility === 'hidden') continue;
    for (const match of node.textContent.matchAll(/[A-Za-z]{4,}/g)) {
      const range = document.createRange();
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      const rects = [...range.getClientRects()].filter(r => r.width > 0);
      if (new Set(rects.map(r => Math.round(r.top))).size > 1) broken.push(match[0]);
    }
  }
  return broken;
}"""
PHONE_PAGES = [
    "/console/?state=all",
    "/console/failures/",
    "/console/conflicts/",
    "/console/dashboard/",
    "/console/audit/",
]


def test_on_a_phone_prose_breaks_between_words(operator_at, django_user_model):
    page = operator_at(PHONE)
    operations = list(Operation.objects.order_by("pk").values_list("pk", flat=True))
    for path in PHONE_PAGES + [f"/console/operations/{pk}/" for pk in operations[::7]] + ["/console/no-such-page/"]:
        page.goto(path)
        assert page.evaluate(WORDS_BROKEN) == [], path


def test_on_a_phone_the_queue_and_an_operation_read_in_whole_words(operator_at):
    page = operator_at(PHONE)
    page.goto("/console/?state=all")
    expect(page.locator("table.work-list td.error .error-head").first).to_be_visible()
    screenshot(page, "narrow-queue")  # docs/console/narrow-queue.png
    page.locator("table.work-list tbody tr").nth(2).scroll_into_view_if_needed()
    screen(page, "narrow-queue-screen")
    page.locator("table.work-list td.key a").nth(2).click()
    screenshot(page, "narrow-operation")
    screen(page, "narrow-operation-screen")
    page.goto("/console/dashboard/")
    page.locator("#destinations").scroll_into_view_if_needed()
    screen(page, "narrow-dashboard-destinations")


def screen(page, name: str) -> None:
    """What one phone screen shows (a full page at 390 px is too tall to read as one picture)."""
    page.screenshot(path=os.path.join(SHOTS, f"{name}.png"))
