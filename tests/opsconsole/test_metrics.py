"""/metrics speaks Prometheus text and shows the ledger's liveness signals."""

from ledger.processing import process_due_operations
from ledger.sweep import sweep
from tests.conftest import event


def test_it_counts_operations_by_state_and_shows_the_oldest_due_age(api, client):
    api.post("/api/v1/events", event("d-1"))
    api.post("/api/v1/events", event("d-2", version=4))
    api.post("/api/v1/events", event("d-3", title="changed"))

    body = client.get("/metrics").content.decode()

    assert 'opsconsole_operations{action="prepare-brief",state="pending"} 2' in body
    assert "opsconsole_open_conflicts 1" in body
    assert "opsconsole_sweep_heartbeat_age_seconds -1" in body  # the sweep never ran
    oldest = next(line for line in body.splitlines() if line.startswith("opsconsole_oldest_due_seconds"))
    assert float(oldest.split()[1]) >= 0


def test_it_reports_the_sweep_heartbeat_once_the_sweep_ran(api, client):
    api.post("/api/v1/events", event("d-1"))
    process_due_operations()
    sweep()

    body = client.get("/metrics").content.decode()

    assert 'opsconsole_operations{action="prepare-brief",state="succeeded"} 1' in body
    assert "opsconsole_oldest_due_seconds 0.000" in body
    heartbeat = next(line for line in body.splitlines() if line.startswith("opsconsole_sweep_heartbeat_age"))
    assert 0 <= float(heartbeat.split()[1]) < 60
