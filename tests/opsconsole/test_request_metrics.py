"""Every request is counted and timed by route template and status, and written to the JSON log as
one access line: the template, never the path (a key in the path would leak data and make one series
per operation), never the query string or the body."""

import json

import pytest

from tests.conftest import event
from tests.opsconsole.conftest import json_log

pytestmark = pytest.mark.django_db

TOKEN = "scrape-me-0123456789"
KEY = "demo:R-42:v3:prepare-brief"


@pytest.fixture(autouse=True)
def metrics_token(settings):
    settings.OPSCONSOLE_METRICS_TOKEN = TOKEN


@pytest.fixture
def access_log():
    """What the access log writes, through the project's JSON formatter."""
    with json_log("opsconsole.access") as stream:
        yield stream


def scrape(client) -> list[str]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    return response.content.decode().splitlines()


def series(lines: list[str], name: str, **labels) -> float:
    """The value of the one sample of ``name`` whose labels include ``labels`` (0 if none)."""
    wanted = [f'{label}="{value}"' for label, value in labels.items()]
    found = [line for line in lines if line.startswith(name + "{") and all(w in line for w in wanted)]
    assert len(found) <= 1, found
    return float(found[0].rsplit(" ", 1)[1]) if found else 0.0


def test_it_counts_and_times_a_route_with_a_key_under_its_template(api, client):
    before = scrape(client)
    api.post("/api/v1/events", event("d-1"))
    for _ in range(3):
        assert api.get(f"/api/v1/operations/{KEY}?traced_query=1").status_code == 200
    assert api.get("/api/v1/operations/demo:R-404:v1:prepare-brief").status_code == 404

    lines = scrape(client)

    route = {"route": "/api/v1/operations/{key}", "method": "GET"}
    count = "opsconsole_http_requests_total"
    assert series(lines, count, **route, status="200") - series(before, count, **route, status="200") == 3
    assert series(lines, count, **route, status="404") - series(before, count, **route, status="404") == 1
    assert series(lines, count, route="/api/v1/events", method="POST", status="201") >= 1
    duration = "opsconsole_http_request_duration_seconds"
    assert (
        series(lines, duration + "_count", **route, status="200")
        - series(before, duration + "_count", **route, status="200")
        == 3
    )
    assert series(lines, duration + "_bucket", **route, status="200", le="+Inf") >= 3
    # No series names a key, a query string, or a path that matched nothing.
    text = "\n".join(lines)
    assert "R-42" not in text
    assert "R-404" not in text
    assert "traced_query" not in text


def test_a_path_that_matches_nothing_is_counted_as_unmatched(client):
    client.get("/no/such/page/C-123456")

    lines = scrape(client)

    assert series(lines, "opsconsole_http_requests_total", route="(unmatched)", method="GET", status="404") >= 1
    assert "C-123456" not in "\n".join(lines)


def test_an_api_path_that_matches_no_route_is_counted_as_unmatched(client):
    """Under /api/ the last route answers what no other matched (opsconsole.errors.api_not_found)."""
    client.get("/api/v2/no/such/C-123456")

    lines = scrape(client)

    assert series(lines, "opsconsole_http_requests_total", route="(unmatched)", method="GET", status="404") >= 1
    assert "C-123456" not in "\n".join(lines)
    assert "^api" not in "\n".join(lines)


def test_an_unusual_method_is_counted_as_other(client):
    client.generic("PROPFIND", "/console/")

    assert series(scrape(client), "opsconsole_http_requests_total", route="/console/", method="other") >= 1


def test_it_writes_one_access_line_per_request_without_query_or_body(api, access_log):
    api.post("/api/v1/events", event("d-1"), HTTP_X_REQUEST_ID="req-post")
    api.get(f"/api/v1/operations/{KEY}?q=secret-query", HTTP_X_REQUEST_ID="req-get")

    lines = [json.loads(line) for line in access_log.getvalue().splitlines()]

    assert [(line["method"], line["route"], line["status"], line["request_id"]) for line in lines] == [
        ("POST", "/api/v1/events", 201, "req-post"),
        ("GET", "/api/v1/operations/{key}", 200, "req-get"),
    ]
    assert all(line["logger"] == "opsconsole.access" and line["level"] == "INFO" for line in lines)
    assert all(isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0 for line in lines)
    written = access_log.getvalue()
    assert "secret-query" not in written
    assert "R-42" not in written
    assert "Review renewal" not in written
