"""gunicorn, as `make serve` runs it, after PostgreSQL ended its worker's session (as a database
restart does): the next API request and the next console page are answered as usual, with no 503
and no 500, the event recorded once, and the replaced connection logged once per ending."""

import time

import httpx
import psycopg
import pytest
from django.db import connection
from django.test import Client

from ledger.core import accounts
from ledger.models import Operation
from tests.conftest import external_event
from tests.faults.gunicorn import running_gunicorn

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

FOUND = "database connection found closed by the server"


def terminate_the_servers_sessions() -> int:
    """End every session on this database but the test's own, and wait until they are gone."""
    connection.ensure_connection()
    ours = connection.connection.info.backend_pid
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
        query = "FROM pg_stat_activity WHERE datname = current_database() AND pid NOT IN (pg_backend_pid(), %s)"
        ended = len(other.execute(f"SELECT pg_terminate_backend(pid) {query}", [ours]).fetchall())
        deadline = time.monotonic() + 10
        while other.execute(f"SELECT 1 {query}", [ours]).fetchone():
            assert time.monotonic() < deadline, "the terminated sessions did not end"
            time.sleep(0.01)
    return ended


def test_a_terminated_session_costs_the_next_requests_nothing(tmp_path, django_user_model):
    workspace, token = accounts.create_workspace(slug="demo", approved_owners=["ops"], actor="test")
    staff = django_user_model.objects.create_superuser("root", password="pw")
    browser = Client()
    browser.force_login(staff)
    cookies = {"sessionid": browser.cookies["sessionid"].value}
    bearer = {"Authorization": f"Bearer {token}"}

    with running_gunicorn(tmp_path, env={"WEB_CONCURRENCY": "1"}) as server, httpx.Client(base_url=server.url) as http:
        assert http.get("/api/v1/operations", headers=bearer).status_code == 200  # the worker holds a connection
        assert terminate_the_servers_sessions() == 1

        answer = http.post("/api/v1/events", json=external_event(request_id="R-1"), headers=bearer)
        assert answer.status_code in (200, 201, 202), answer.text

        assert terminate_the_servers_sessions() == 1
        http.cookies.update(cookies)  # a person's session from here on
        page = http.get("/console/")
        assert page.status_code == 200, page.text[:500]
        assert 'name="password"' not in page.text  # the queue itself, not the login page

        log = server.log_path.read_text()

    assert Operation.objects.count() == 1
    assert log.count(FOUND) == 2, log[-3000:]
    # The access lines: no request answered 503 or 500.
    assert '"status": 503' not in log
    assert '"status": 500' not in log
