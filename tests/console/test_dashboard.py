"""The console's dashboard: a person sees the figures of their own workspaces only, drawn as SVG
with the same figures in tables, links to where one acts, and a fragment htmx refreshes."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.core import audit_chain
from ledger.core.selectors import COUNT_CAP
from ledger.engine.processing import process_due_operations
from ledger.models import AuditEvent, FlowSample, Workspace
from ledger.outcomes import PermanentError
from ledger.people import pause
from ledger.reads import dashboard
from reconciliation.models import Mismatch, ReconciliationRun
from tests.ledger.conftest import START, submit

URL = "/console/dashboard/"


@pytest.fixture
def other(db):
    return Workspace.objects.create(slug="other")


@pytest.fixture
def day(workspace, other, action, time_machine):
    """An hour ago: in "demo" two operations succeed and one fails for good; in "other" five succeed
    and one waits. Then the sweep's samples are taken up to now."""
    # An hour before a fixed time in the middle of a month (a chain's events never go back a month,
    # ledger.core.audit_mac.seal: an hour before the real time may be in the month before).
    time_machine.move_to(START + timedelta(minutes=20) - timedelta(hours=1), tick=False)
    action.destination.answer(PermanentError("owner does not exist"))
    for number in range(3):
        submit(workspace, action.name, request_id=f"R-{number}")
    process_due_operations(worker="w1")
    for number in range(5):
        submit(other, action.name, request_id=f"O-{number}")
    process_due_operations(worker="w1")
    submit(other, action.name, request_id="O-waiting")
    time_machine.move_to(timezone.now() + timedelta(hours=1), tick=False)
    while dashboard.take_samples() not in (None, timezone.now() - dashboard.SETTLE):
        pass


def figure(html: str, name: str) -> str:
    found = re.search(rf'data-figure="{name}">([^<]*)<', html)
    assert found, name
    return found.group(1).strip()


def state_count(html: str, state: str, column: str = "") -> str:
    """A number in the row of ``state`` in the table of counts by state: ``column`` "now" (an
    unfinished state's), "live" or "day" (a final state's: since the live part began, in 24 h);
    by default the one it has of "now" and "day"."""
    row = re.search(rf'<tr id="state-{state}">(.*?)</tr>', html, re.S)
    assert row, state
    columns = [column] if column else ["now", "day"]
    found = re.search(rf'<td class="num" data-column="(?:{"|".join(columns)})">([^<]*)</td>', row.group(1))
    assert found, (state, column)
    return found.group(1).strip()


def test_it_sends_an_anonymous_visitor_to_the_login_page(client):
    response = client.get(URL)
    assert response.status_code == 302
    assert response.url == f"/accounts/login/?next={URL}"


def test_a_refresh_after_the_session_ended_sends_the_whole_page_to_the_login(client):
    response = client.get(URL, headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert response.content == b""
    assert response["HX-Redirect"] == f"/accounts/login/?next={URL}"


def test_it_refuses_someone_who_belongs_to_no_workspace(client, login):
    login("nobody")
    assert client.get(URL).status_code == 403


def test_a_viewer_of_one_workspace_sees_only_that_workspaces_figures(client, login, day):
    login("viewer")
    html = client.get(URL).content.decode()
    assert "Figures of workspace demo" in html
    assert state_count(html, "succeeded") == "2"
    assert state_count(html, "needs_review") == "1"
    assert state_count(html, "pending") == "0"
    assert figure(html, "backlog") == "1"
    assert figure(html, "throughput").startswith("2 finished in 24 h")
    assert "33.3 %" in html  # 1 failed attempt of 3
    assert "other" not in html


def test_a_superuser_sees_every_workspace(client, day, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", email=None, password=None))
    html = client.get(URL).content.decode()
    assert "Figures of every workspace" in html
    assert state_count(html, "succeeded") == "7"
    assert state_count(html, "pending") == "1"
    assert figure(html, "oldest-due") == "1 h 0 min"
    assert "12.5 %" in html  # 1 of 8


def test_it_draws_the_charts_as_svg_without_style_attributes_with_tables_beside_them(client, login, day):
    login("viewer")
    html = client.get(URL).content.decode()
    assert html.count("<svg") == 4
    assert "style=" not in html
    assert "<script>" not in html
    bars = re.findall(r'<rect class="bar"[^>]*><title>([^<]*)</title>', html)
    hour = timezone.localtime(timezone.now() - timedelta(hours=1))
    assert bars == [f"{hour:%H}:00: 2"]
    assert "operations per hour" in html
    assert "hour of the day (UTC)" in html
    assert '<details id="hours-table">' in html
    assert html.count("not sampled") == 23


def test_it_links_each_figure_to_where_one_acts(client, login, day):
    login("operator")
    html = client.get(URL).content.decode()
    assert 'href="/console/?state=needs_review"' in html
    assert 'href="/console/?state=pending_approval"' in html
    assert 'href="/console/?state=pending"' not in html  # not a state the queue offers
    assert 'href="/console/mismatches/"' in html
    assert 'href="/console/service-levels/"' in html


def test_held_work_is_counted_and_linked_to_the_queue(client, login, workspace, action):
    submit(workspace, action.name, request_id="R-held")
    pause.set_paused(paused=True, actor="alice", reason="maintenance", workspace=workspace)
    login("viewer")
    html = client.get(URL).content.decode()
    assert "1 held: see them</a>" in html
    assert 'href="/console/?state=held"' in html
    assert figure(html, "oldest-due") == "nothing due"
    assert figure(html, "oldest-held").endswith(" s")


def test_open_mismatches_are_counted_by_kind_within_the_persons_workspaces(client, login, workspace, other):
    now = timezone.now()
    run = ReconciliationRun.objects.create(
        started_at=now, since=now - timedelta(hours=1), until=now, status="succeeded", operations_checked=12
    )
    for where, reference in ((workspace, "demo:R-1"), (workspace, "demo:R-2"), (other, "other:R-3")):
        Mismatch.objects.create(
            run=run, workspace=where, action="send-notice", kind="missing_at_destination", reference=reference
        )
    login("viewer")
    html = client.get(URL).content.decode()
    assert "2 open mismatches: decide them" in html
    assert re.search(r"Missing at destination</span> 2<", html)
    assert '<th scope="col" class="num">Checked</th>' not in html  # a run counts every workspace


def test_it_says_when_nothing_was_sampled_yet(client, login):
    login("viewer")
    html = client.get(URL).content.decode()
    assert "before, not sampled yet" in html
    assert "No attempt ended in the last 24 hours." in html
    assert "The reconciliation audit has not run yet" in html


def test_htmx_gets_the_fragment_alone_to_refresh_it(client, login, day):
    login("viewer")
    page = client.get(URL)
    fragment = client.get(URL, headers={"HX-Request": "true"})
    assert b"<html" in page.content
    assert b"<html" not in fragment.content
    html = fragment.content.decode()
    assert '<div id="dashboard"' in html
    assert 'hx-get="/console/dashboard/" hx-trigger="every 15s" hx-swap="outerHTML"' in html
    assert "HX-Request" in fragment["Vary"]


def test_the_dashboard_is_the_first_item_of_the_navigation_and_the_queue_stays_home(client, login):
    login("viewer")
    html = client.get("/console/").content.decode()
    assert html.index('href="/console/dashboard/"') < html.index(">Needs attention<")
    assert "<h1>Needs attention</h1>" in html


# --- the live last hour: "now" means now ----------------------------------------------


def work(workspace, action, *, succeed: int, fail: int = 0, prefix: str) -> None:
    """``succeed + fail`` operations arrive and are worked through now; the first ``fail`` are
    refused for good by the destination."""
    action.destination.answer(*[PermanentError("owner does not exist")] * fail)
    for number in range(succeed + fail):
        submit(workspace, action.name, request_id=f"{prefix}-{number}")
    while process_due_operations(worker="w1"):
        pass


def sample_up_to_now() -> None:
    while dashboard.take_samples() not in (None, timezone.now() - dashboard.SETTLE):
        pass


def hour_row(html: str, hh_mm: str) -> list[str]:
    """One hour's row in the hours' table: its figures, then where they come from (its age)."""
    row = re.search(rf'<tr>\s*<td class="when"><time [^>]*>{hh_mm}</time>(.*?)</tr>', html, re.S)
    assert row, hh_mm
    age, figures = row.group(1).split("</td>", 1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", figures, re.S)
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in cells] + [re.sub(r"<[^>]+>", "", age).strip()]


def test_an_incident_minutes_after_the_last_sample_shows_at_once(client, login, workspace, other, action, time_machine):
    """The newcomer's day: 4 minutes after thousands of successes and failures the dashboard said
    "succeeded 5, failed 0 of 5", the sweep's last sample. The last hour is counted live now."""
    time_machine.move_to(START + timedelta(minutes=10), tick=False)
    work(workspace, action, succeed=5, prefix="early")
    time_machine.move_to(START + timedelta(minutes=20), tick=False)
    sample_up_to_now()
    time_machine.move_to(START + timedelta(minutes=21), tick=False)
    work(workspace, action, succeed=40, fail=8, prefix="incident")
    work(other, action, succeed=7, prefix="elsewhere")  # not the viewer's
    time_machine.move_to(START + timedelta(minutes=24), tick=False)

    assert dashboard.take_samples() is None  # 4 minutes: too soon for the next sample
    assert sum(FlowSample.objects.values_list("succeeded", flat=True)) == 5  # what the page used to show
    login("viewer")
    html = client.get(URL).content.decode()
    assert state_count(html, "succeeded", "live") == "45"
    assert state_count(html, "succeeded", "day") == "45"
    assert state_count(html, "needs_review", "now") == "8"
    assert '<span class="visually-hidden">Finished </span>Since 09:00' in html
    assert figure(html, "throughput").startswith("45 finished in 24 h,\n      45 of them since 09:00 (live)")
    assert "Failed attempts as a share of attempts: 8 of 53;" in figure(html, "failures").replace("\n ", "")
    assert "live</span>: 8 of 53." in html
    assert "15.1 %" in html  # 8 of 53, by action and by destination
    assert hour_row(html, "09:00") == ["45", "53", "8", "8", "live"]
    assert hour_row(html, "08:00")[-1] == "sampled 4 min ago"
    assert 'before, the sweep\'s samples, <span class="age sampled">sampled 4 min ago</span>' in html


def test_the_minutes_the_sweep_has_not_sampled_before_the_hour_are_live_too(
    client, login, workspace, action, time_machine
):
    """Two minutes into an hour, the last sample ended three minutes before it: those minutes of
    the previous hour are counted live, and its row says both."""
    time_machine.move_to(START + timedelta(minutes=50), tick=False)
    work(workspace, action, succeed=3, prefix="before")
    time_machine.move_to(START + timedelta(minutes=58), tick=False)
    sample_up_to_now()  # up to 09:57:55
    time_machine.move_to(START + timedelta(minutes=59), tick=False)
    work(workspace, action, succeed=6, fail=2, prefix="late")
    time_machine.move_to(START + timedelta(minutes=62), tick=False)
    work(workspace, action, succeed=1, prefix="new hour")

    assert dashboard.take_samples() is None
    login("viewer")
    html = client.get(URL).content.decode()
    assert hour_row(html, "09:00") == ["9", "11", "2", "0", "live from 09:57"]
    assert hour_row(html, "10:00") == ["1", "1", "0", "2", "live"]  # the backlog now: the two refused
    assert state_count(html, "succeeded", "day") == "10"
    assert state_count(html, "succeeded", "live") == "7"
    assert '<span class="visually-hidden">Finished </span>Since 09:57' in html


def test_when_the_sweep_stood_still_the_live_hour_does_not_reach_back_and_the_gap_is_named(
    client, login, workspace, action, time_machine
):
    time_machine.move_to(START - timedelta(hours=3) + timedelta(minutes=10), tick=False)
    work(workspace, action, succeed=5, prefix="sampled")
    time_machine.move_to(START - timedelta(hours=3) + timedelta(minutes=20), tick=False)
    sample_up_to_now()  # up to 06:19:55; then the cluster stops
    time_machine.move_to(START - timedelta(hours=1) + timedelta(minutes=10), tick=False)
    work(workspace, action, succeed=4, prefix="uncounted")
    time_machine.move_to(START + timedelta(minutes=40), tick=False)
    work(workspace, action, succeed=3, prefix="live")
    time_machine.move_to(START + timedelta(minutes=50), tick=False)

    login("viewer")
    html = client.get(URL).content.decode()
    assert state_count(html, "succeeded", "day") == "8"
    assert state_count(html, "succeeded", "live") == "3"
    assert "the sweep has not sampled for a while; is the worker cluster running?" in html
    assert re.search(r"Not counted: from <time[^>]*>06:19</time>\s*to <time[^>]*>08:50</time>", html)
    assert hour_row(html, "08:00")[-1] == "live from 08:50"


@pytest.mark.slow
def test_more_events_than_the_live_read_takes_are_counted_from_the_newest_and_said_so(
    client, login, workspace, action, time_machine
):
    operation = submit(workspace, action.name, request_id="R-busy")
    first = START + timedelta(minutes=5)
    events = [
        AuditEvent(
            operation=operation,
            workspace=workspace,
            actor="worker",
            kind="succeeded",
            from_state="processing",
            to_state="succeeded",
            created_at=first + n * timedelta(milliseconds=200),
        )
        for n in range(COUNT_CAP + 10)
    ]
    audit_chain.append(events)
    time_machine.move_to(START + timedelta(minutes=40), tick=False)

    login("viewer")
    response = client.get(URL)
    live = response.context["figures"].live  # never sampled: the live part reaches back an hour
    assert live.capped
    assert live.counted_from == first + 9 * timedelta(milliseconds=200)
    html = response.content.decode()
    assert state_count(html, "succeeded", "live") == "more than 10,001"
    assert re.search(
        r"More than 10,000 attempts and finishes since\s*<time[^>]*>08:40:00</time>: too many to read at each "
        r"view,\s*the live figures count those since <time[^>]*>09:05:01</time>",
        html,
    )
