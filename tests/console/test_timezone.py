"""Times in the person's time zone: the browser's, from the ``tz`` cookie static/timezone.js sets,
shown with the zone's name and an ISO <time> element; UTC without the cookie or for a name that
is not a time zone."""

import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from ledger.models import Operation
from ledger.people import pause
from opsconsole.console.templatetags.console_time import when, when_span, when_text
from opsconsole.middleware import browser_zone

WINTER = datetime(2026, 12, 1, 16, 4, 5, tzinfo=UTC)
SUMMER = datetime(2026, 7, 1, 16, 4, 5, tzinfo=UTC)


@pytest.fixture
def review(make_operation):
    operation = make_operation("needs_review")
    Operation.objects.filter(pk=operation.pk).update(created_at=WINTER, updated_at=WINTER)
    return operation


def times_on(response) -> list[tuple[str, str]]:
    return re.findall(r'<time datetime="([^"]+)">([^<]+)</time>', response.content.decode())


def test_the_browser_zone_from_the_cookie_shows_times_with_its_name(client, login, review):
    login("viewer")
    client.cookies["tz"] = "Europe/Berlin"

    queue = client.get("/console/")
    operation = client.get(f"/console/operations/{review.pk}/")

    assert ("2026-12-01T17:04:05+01:00", "2026-12-01 17:04:05 CET") in times_on(queue)
    assert ("2026-12-01T17:04:05+01:00", "2026-12-01 17:04:05 CET") in times_on(operation)


def test_without_the_cookie_times_are_utc(client, login, review):
    login("viewer")

    assert ("2026-12-01T16:04:05+00:00", "2026-12-01 16:04:05 UTC") in times_on(client.get("/console/"))


@pytest.mark.parametrize(
    "cookie",
    [
        "Mars/Olympus",
        "../../etc/passwd",
        "/usr/share/zoneinfo/Europe/Berlin",
        "Europe/Berlin\x00",
        "",
        "europe/berlin",
        "x" * 5000,
    ],
)
def test_a_name_that_is_no_time_zone_means_utc(client, login, review, cookie):
    login("viewer")
    client.cookies["tz"] = cookie

    response = client.get("/console/")

    assert response.status_code == 200
    assert ("2026-12-01T16:04:05+00:00", "2026-12-01 16:04:05 UTC") in times_on(response)


def test_the_zone_is_the_requests_own(client, login, review):
    """The middleware leaves no zone behind for the next request (a thread serves many people)."""
    login("viewer")
    client.cookies["tz"] = "Asia/Tokyo"
    client.get("/console/")

    assert timezone.get_current_timezone_name() == "UTC"
    del client.cookies["tz"]
    assert ("2026-12-01T16:04:05+00:00", "2026-12-01 16:04:05 UTC") in times_on(client.get("/console/"))


def test_every_console_page_shows_its_times_in_the_zone(client, login, workspace, review):
    pause.set_paused(paused=True, actor="alice", reason="incident", workspace=workspace)
    login("viewer")
    client.cookies["tz"] = "America/New_York"

    for path in ["/console/", "/console/audit/", "/console/controls/", f"/console/operations/{review.pk}/"]:
        shown = times_on(client.get(path))
        assert shown, path
        assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d E[SD]T", text) for _, text in shown), (path, shown)


def test_the_filter_names_summer_time_and_zones_without_a_name():
    with timezone.override(browser_zone("Europe/Berlin")):
        assert when_text(SUMMER) == "2026-07-01 18:04:05 CEST"
        assert when(SUMMER) == '<time datetime="2026-07-01T18:04:05+02:00">2026-07-01 18:04:05 CEST</time>'
    with timezone.override(browser_zone("Asia/Dubai")):
        assert when_text(WINTER) == "2026-12-01 20:04:05 +04"
    assert when(None) == "—"
    assert when_text(None) == "—"


def test_the_audit_page_says_its_dates_are_days_in_the_zone(client, login):
    login("viewer")
    client.cookies["tz"] = "Europe/Berlin"

    assert "Dates are days in your time zone, Europe/Berlin." in client.get("/console/audit/").content.decode()


def test_the_base_layout_loads_the_script_that_sets_the_cookie(client, login):
    login("viewer")

    page = client.get("/console/").content.decode()

    assert re.search(r'<script src="/static/timezone\.js" defer></script>', page)


@pytest.mark.parametrize(
    ("since", "until", "shown"),
    [
        # Today, within the day: the times alone.
        ("2026-12-05T13:26:00", "2026-12-05T14:26:00", "13:26–14:26 CET"),
        # A 24-hour window reads as one, not as "13:26–13:26".
        ("2026-12-04T13:26:00", "2026-12-05T13:26:00", "2026-12-04 13:26 – 2026-12-05 13:26 CET"),
        # Another single day: its date once.
        ("2026-12-01T09:00:00", "2026-12-01T10:00:00", "2026-12-01 09:00–10:00 CET"),
    ],
)
def test_a_time_range_shows_its_dates_when_it_spans_days_or_is_not_today(time_machine, since, until, shown):
    time_machine.move_to(datetime(2026, 12, 5, 16, 0, tzinfo=UTC))
    zone = ZoneInfo("Europe/Berlin")
    with timezone.override(zone):
        start = datetime.fromisoformat(since).replace(tzinfo=zone)
        end = datetime.fromisoformat(until).replace(tzinfo=zone)
        html = when_span(start, end)

    assert re.sub(r"<[^>]+>", "", html) == shown
    assert f'<time datetime="{start.isoformat()}">' in html


def test_a_range_without_an_end_is_a_dash():
    assert when_span(WINTER, None) == "—"
