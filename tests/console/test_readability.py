"""What the console's lists read like after a day of the demo's: a last error that says the status
and the destination's code first, summaries that tell rows apart without a sensitive value, a
Destination filter of destinations by name, and a server error page that needs no database."""

import html
import re

import pytest
from django.test import RequestFactory
from django.urls import get_resolver

from ledger.actions import summaries
from ledger.models import Operation
from opsconsole.console.templatetags.console_text import error_parts
from tests.day import a_full_day  # noqa: F401  the fixture


@pytest.mark.parametrize(
    ("message", "headline", "rest"),
    [
        (
            "HTTP 422 from 127.0.0.1 [invalid_version]: version out of range",
            "HTTP 422 [invalid_version]",
            "version out of range",
        ),
        ("HTTP 503 from helpdesk: try again later", "HTTP 503", "try again later"),
        ("HTTP 409 from 10.0.0.1:8001 [request_archived]", "HTTP 409 [request_archived]", ""),
        ("Remote end closed connection without response", "", "Remote end closed connection without response"),
        ("", "", ""),
    ],
)
def test_a_last_error_reads_its_status_and_code_first(message, headline, rest):
    assert (error_parts(message).headline, error_parts(message).rest) == (headline, rest)


def test_a_summary_tells_apart_what_only_a_hashed_identity_tells_apart():
    key = "demo:h.888ae93eb06f1700dfcadc7e688268ba:v1:send-welcome"
    assert summaries.identified("Welcome in en · sign-up 1", key) == "h.888ae93e · Welcome in en · sign-up 1"
    assert summaries.identified("R-42 v3 · Review", "demo:R-42:v3:prepare-brief") == "R-42 v3 · Review"


@pytest.mark.slow
@pytest.mark.usefixtures("a_full_day")
def test_the_queue_after_a_day_reads_row_by_row(client, django_user_model):
    client.force_login(django_user_model.objects.get(username="operator"))
    page = client.get("/console/", {"state": "all"}).content.decode()

    # The status and the destination's code, then the category and its words.
    assert re.search(
        r'<span class="error-head">HTTP 4\d\d \[[a-z_]+\]</span> <span class="error-category">permanent</span>', page
    )
    # Every welcome reads differently, and no address shows.
    welcomes = re.findall(r'title="(h\.[0-9a-f]{8} · Welcome in [^"]*)"', page)
    assert len(welcomes) >= 2, welcomes
    assert len(set(welcomes)) == len(welcomes), welcomes
    assert "@example.com" not in page
    # The Destination filter: destinations by name, not actions, not an address.
    options = re.search(r'<select name="destination"[^>]*>(.*?)</select>', page, re.S)[1]
    shown = [html.unescape(label) for label in re.findall(r">([^<]+)</option>", options)]
    assert shown == ["All destinations", "fulfilment", "invoicing", "stand-in", "subscribers' receivers"], shown


@pytest.mark.usefixtures("a_full_day")
@pytest.mark.slow
def test_the_dashboard_lists_every_destination_called_under_one_name(client, django_user_model):
    client.force_login(django_user_model.objects.get(username="operator"))
    page = client.get("/console/dashboard/").content.decode()

    panel = re.search(r'<table id="destinations">(.*?)</table>', page, re.S)[1]
    assert re.findall(r'<tr id="destination-([^"]+)"', panel) == [
        "fulfilment",
        "invoicing",
        "stand-in",
        "subscribers-receivers",
    ]
    rates = re.search(r'<table class="rates" id="failures-by-destination">(.*?)</table>', page, re.S)[1]
    assert "stand-in" in rates
    assert "http://" not in page
    assert Operation.objects.filter(action="file-ticket", last_error_category="permanent").exists()


def test_the_server_error_page_asks_nothing_of_the_database(django_assert_num_queries, db):
    with django_assert_num_queries(0):
        response = get_resolver().resolve_error_handler(500)(RequestFactory().get("/console/"))

    assert response.status_code == 500
    assert "Something went wrong on our side" in response.content.decode()
