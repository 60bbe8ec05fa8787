"""/healthz and /readyz: what a load balancer asks. Unauthenticated, before the host check, the HTTPS
redirect and CSRF; each answers one word, 200 or 503, and nothing else.

/healthz: the process answers. /readyz: the database answers, its migrations are all applied, and
the sweep (the qcluster's every-minute job, ledger.sweep) wrote its heartbeat recently.
"""

import os
import subprocess
import sys
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder
from django.utils import timezone

from ledger.models import Heartbeat
from ledger.sweep import sweep
from opsconsole import health
from tests.faults.gunicorn import free_port
from tests.faults.qcluster import PROJECT_DIR

pytestmark = pytest.mark.django_db

PROBES = ("/healthz", "/readyz")


@pytest.fixture(autouse=True)
def migrations_not_yet_known(monkeypatch):
    """Each test starts as a fresh process would: not yet known to be migrated."""
    monkeypatch.setattr(health, "_migrated", False)


def assert_word(response, status: int, word: str):
    assert (response.status_code, response.content.decode()) == (status, f"{word}\n")
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Cache-Control"] == "no-store"
    # Nothing but the word: no cookie, no request id, no server detail.
    assert not response.cookies
    assert "X-Request-ID" not in response


def test_healthz_answers_ok_while_the_process_lives(client):
    assert_word(client.get("/healthz"), 200, "ok")


def test_readyz_answers_ok_when_the_database_is_migrated_and_the_sweep_ran(client):
    sweep()

    assert_word(client.get("/readyz"), 200, "ok")


def test_readyz_answers_503_before_the_sweep_ever_ran(client, caplog):
    """And logs why once, as a warning: not also an ERROR of django.request for every probe."""
    assert not Heartbeat.objects.filter(name="sweep").exists()

    assert_word(client.get("/readyz"), 503, "unavailable")
    assert_word(client.get("/healthz"), 200, "ok")
    assert [(record.name, record.levelname) for record in caplog.records] == [("opsconsole.health", "WARNING")]


def test_readyz_answers_503_when_the_sweep_heartbeat_is_stale(client, settings):
    settings.OPSCONSOLE_SWEEP_STALE_SECONDS = 300
    with time_machine.travel(timezone.now() - timedelta(minutes=6), tick=False):
        sweep()

    assert_word(client.get("/readyz"), 503, "unavailable")
    with time_machine.travel(timezone.now() - timedelta(minutes=4), tick=False):
        sweep()
    assert_word(client.get("/readyz"), 200, "ok")


def test_readyz_ignores_the_sweep_when_told_to(client, settings):
    settings.OPSCONSOLE_SWEEP_STALE_SECONDS = 0

    assert_word(client.get("/readyz"), 200, "ok")


def test_readyz_answers_503_while_a_migration_is_unapplied(client):
    sweep()
    recorder = MigrationRecorder(connection)
    latest = max(name for app, name in recorder.applied_migrations() if app == "ledger")
    recorder.record_unapplied("ledger", latest)

    assert_word(client.get("/readyz"), 503, "unavailable")
    recorder.record_applied("ledger", latest)
    assert_word(client.get("/readyz"), 200, "ok")


def test_readyz_reads_the_migrations_only_until_they_are_all_applied(client, django_assert_num_queries):
    sweep()
    with django_assert_num_queries(2):  # the applied migrations, the heartbeat
        assert client.get("/readyz").status_code == 200
    with django_assert_num_queries(1):  # the heartbeat only: the migrations are known to be applied
        assert client.get("/readyz").status_code == 200


def test_the_probes_answer_any_host_over_plain_http_without_a_session_or_csrf(client, settings):
    """A load balancer probes by the instance's address, over HTTP, without cookies."""
    settings.SECURE_SSL_REDIRECT = True
    settings.ALLOWED_HOSTS = ["console.example.com"]
    sweep()

    for path in PROBES:
        assert_word(client.get(path, HTTP_HOST="10.0.3.17:8000"), 200, "ok")
        assert client.head(path, HTTP_HOST="10.0.3.17").status_code == 200
        assert client.get(path + "/", HTTP_HOST="console.example.com").status_code == 301  # only that path
    # The rest is still checked: a host not allowed is refused, plain HTTP redirected.
    assert client.get("/accounts/login/", HTTP_HOST="10.0.3.17").status_code == 400
    assert client.get("/accounts/login/", HTTP_HOST="console.example.com").status_code == 301


DOWN_SCRIPT = """
import django
django.setup()
from django.test import Client
client = Client()
for path in ("/healthz", "/readyz"):
    response = client.get(path)
    print(path, response.status_code, repr(response.content.decode()))
"""


def test_readyz_answers_503_when_the_database_cannot_be_reached(tmp_path):
    """A real process whose database is a PostgreSQL port nothing listens on."""
    env = {key: value for key, value in os.environ.items() if key not in ("DEBUG", "OPSCONSOLE_SECURE")}
    env.update(
        {
            "DATABASE_URL": f"postgres://postgres@127.0.0.1:{free_port()}/nowhere",
            "DJANGO_SETTINGS_MODULE": "opsconsole.settings",
            "SECRET_KEY": "insecure-test-only-key",
            "OPSCONSOLE_KEY_SECRET": "insecure-test-only-key-secret",
            "OPSCONSOLE_AUDIT_KEY": "insecure-test-only-audit-key",
        }
    )

    done = subprocess.run(
        [sys.executable, "-c", DOWN_SCRIPT], cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["/healthz 200 'ok\\n'", "/readyz 503 'unavailable\\n'"], done.stderr
