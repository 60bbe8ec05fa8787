"""The console's dashboard: a person sees the figures of their own workspaces only, drawn as SVG
with the same figures in tables, links to where one acts, and a fragment htmx refreshes."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.core import pause
from ledger.engine.processing import process_due_operations
from ledger.models import Workspace
from ledger.outcomes import PermanentError
from ledger.reads import dashboard
from reconciliation.models import Mismatch, ReconciliationRun
from tests.ledger.conftest import submit

URL = "/console/dashboard/"


@pytest.fixture
def other(db):
    return Workspace.objects.create(slug="other")


@pytest.fixture
def day(workspace, other, action, time_machine):
    """An hour ago: in "demo" two operations succeed and one fails for good; in "other" five succeed
    and one waits. Then the sweep's samples are taken up to now."""
    time_machine.move_to(timezone.now() - timedelta(hours=1), tick=False)
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


def state_count(html: str, state: str) -> str:
    """The number in the row of ``state`` in the table of counts by state."""
    found = re.search(rf'<tr id="state-{state}">.*?<td class="num">([^<]*)</td>', html, re.S)
    assert found, state
    return found.group(1).strip()


def test_it_sends_an_anonymous_visitor_to_the_login_page(client):
    response = client.get(URL)
    assert response.status_code == 302
    assert response.url == f"/accounts/login/?next={URL}"


def test_a_refresh_after_the_session_ended_sends_the_whole_page_to_the_login(client):
    response = client.get(URL, headers={"HX-Request": "true"})
    assert response.status_code == 200 and response.content == b""
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
    assert "style=" not in html and "<script>" not in html
    bars = re.findall(r'<rect class="bar"[^>]*><title>([^<]*)</title>', html)
    hour = timezone.localtime(timezone.now() - timedelta(hours=1))
    assert bars == [f"{hour:%H}:00: 2"]
    assert "operations per hour" in html and "hour of the day (UTC)" in html
    assert '<details id="hours-table">' in html and html.count("not sampled") == 23


def test_it_links_each_figure_to_where_one_acts(client, login, day):
    login("operator")
    html = client.get(URL).content.decode()
    assert 'href="/console/?state=needs_review"' in html
    assert 'href="/console/?state=pending_approval"' in html
    assert 'href="/console/?state=pending"' not in html  # not a state the queue offers
    assert 'href="/console/mismatches/"' in html and 'href="/console/service-levels/"' in html


def test_held_work_is_counted_and_linked_to_the_queue(client, login, workspace, action):
    submit(workspace, action.name, request_id="R-held")
    pause.set_paused(paused=True, actor="alice", reason="maintenance", workspace=workspace)
    login("viewer")
    html = client.get(URL).content.decode()
    assert "1 held: see them</a>" in html and 'href="/console/?state=held"' in html
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
    assert re.search(r"missing_at_destination</span> 2<", html)
    assert '<th scope="col" class="num">Checked</th>' not in html  # a run counts every workspace


def test_it_says_when_nothing_was_sampled_yet(client, login):
    login("viewer")
    html = client.get(URL).content.decode()
    assert "Not sampled yet" in html
    assert "No attempt ended in the last 24 hours." in html
    assert "The reconciliation audit has not run yet" in html


def test_htmx_gets_the_fragment_alone_to_refresh_it(client, login, day):
    login("viewer")
    page = client.get(URL)
    fragment = client.get(URL, headers={"HX-Request": "true"})
    assert b"<html" in page.content and b"<html" not in fragment.content
    html = fragment.content.decode()
    assert '<div id="dashboard"' in html
    assert 'hx-get="/console/dashboard/" hx-trigger="every 15s" hx-swap="outerHTML"' in html
    assert "HX-Request" in fragment["Vary"]


def test_the_dashboard_is_the_first_item_of_the_navigation_and_the_queue_stays_home(client, login):
    login("viewer")
    html = client.get("/console/").content.decode()
    assert html.index('href="/console/dashboard/"') < html.index(">Needs attention<")
    assert "<h1>Needs attention</h1>" in html
