"""/metrics speaks Prometheus text and shows the ledger's liveness signals, to a scraper that
presents the metrics token; without a token configured it is off."""

import pytest

from ledger.processing import process_due_operations
from ledger.sweep import sweep
from tests.conftest import event

TOKEN = "scrape-me-0123456789"


@pytest.fixture(autouse=True)
def metrics_token(settings):
    settings.OPSCONSOLE_METRICS_TOKEN = TOKEN


def scrape(client):
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    return response.content.decode()


def test_it_counts_operations_by_state_and_shows_the_oldest_due_age(api, client):
    api.post("/api/v1/events", event("d-1"))
    api.post("/api/v1/events", event("d-2", version=4))
    api.post("/api/v1/events", event("d-3", title="changed"))

    body = scrape(client)

    assert 'opsconsole_operations{action="prepare-brief",state="pending"} 2' in body
    assert "opsconsole_open_conflicts 1" in body
    assert "opsconsole_sweep_heartbeat_age_seconds -1" in body  # the sweep never ran
    oldest = next(line for line in body.splitlines() if line.startswith("opsconsole_oldest_due_seconds"))
    assert float(oldest.split()[1]) >= 0


def test_it_reports_the_sweep_heartbeat_once_the_sweep_ran(api, client):
    api.post("/api/v1/events", event("d-1"))
    process_due_operations()
    sweep()

    body = scrape(client)

    assert 'opsconsole_operations{action="prepare-brief",state="succeeded"} 1' in body
    assert "opsconsole_oldest_due_seconds 0.000" in body
    heartbeat = next(line for line in body.splitlines() if line.startswith("opsconsole_sweep_heartbeat_age"))
    assert 0 <= float(heartbeat.split()[1]) < 60


@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer"])
def test_it_refuses_a_scrape_without_the_token(client, db, header):
    extra = {"HTTP_AUTHORIZATION": header} if header else {}

    response = client.get("/metrics", **extra)

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert "opsconsole_operations" not in response.content.decode()


def test_it_is_off_without_a_token_configured(client, db, settings):
    settings.OPSCONSOLE_METRICS_TOKEN = ""

    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 404
