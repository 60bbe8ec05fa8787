"""The app serves as a role that owns nothing (``manage.py serving_role``): through raw psql it cannot
turn the audit trail's triggers off, TRUNCATE it, change or delete its rows, or replace its hash
functions; and the app works as it (an event submitted through the API of a real gunicorn)."""

import os
import re
import secrets
import subprocess
import sys
from io import StringIO
from urllib.parse import quote

import httpx
import pytest
from django.core.management import call_command
from django.db import connection

from ledger.models import AuditEvent, Operation
from tests.conftest import R42, psql_program
from tests.faults.gunicorn import Gunicorn
from tests.faults.qcluster import PROJECT_DIR, database_url

REFUSED = [
    ("ALTER TABLE ledger_auditevent DISABLE TRIGGER ledger_auditevent_append_only", "must be owner of table"),
    ("ALTER TABLE ledger_auditevent DISABLE TRIGGER ALL", "must be owner of table"),
    ("SET session_replication_role = replica", "permission denied to set parameter"),
    ("TRUNCATE ledger_auditevent", "permission denied for table ledger_auditevent"),
    ("UPDATE ledger_auditevent SET message = 'nothing to see'", "permission denied for table ledger_auditevent"),
    ("DELETE FROM ledger_auditevent", "permission denied for table ledger_auditevent"),
    (
        "CREATE OR REPLACE FUNCTION ledger_audit_head(a bigint, b bigint, c integer) RETURNS jsonb "
        "LANGUAGE sql AS $$ SELECT '[]'::jsonb $$",
        "permission denied for schema public|must be owner of function",
    ),
    ("DROP TRIGGER ledger_auditevent_no_truncate ON ledger_auditevent", "must be owner of"),
]


@pytest.fixture
def serving_role():
    """A login role made by ``manage.py serving_role`` on the test database; dropped afterwards."""
    role, password = f"oc_serving_{secrets.token_hex(4)}", secrets.token_urlsafe(18)
    out = StringIO()
    # One argument with "=": a generated password may start with "-", which argparse reads as an option.
    call_command("serving_role", role, f"--password={password}", stdout=out)
    settings = connection.settings_dict
    url = (
        f"postgres://{role}:{quote(password, safe='')}@{settings.get('HOST') or '127.0.0.1'}"
        f":{settings.get('PORT') or 5432}/{settings['NAME']}"
    )
    yield url, out.getvalue()
    with connection.cursor() as cursor:
        cursor.execute(f"DROP OWNED BY {role}")
        cursor.execute(f"DROP ROLE {role}")


def psql(url: str, sql: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [psql_program(), url, "-X", "-v", "ON_ERROR_STOP=1", "-c", sql], capture_output=True, text=True, timeout=60
    )


@pytest.mark.django_db(transaction=True)
def test_the_serving_role_cannot_rewrite_the_audit_trail(workspace, serving_role):
    url, _ = serving_role
    events = AuditEvent.objects.count()
    assert events

    for sql, refusal in REFUSED:
        result = psql(url, sql)
        assert result.returncode != 0, f"{sql!r} was allowed to the serving role"
        assert re.search(refusal, result.stderr), result.stderr

    assert AuditEvent.objects.count() == events
    assert psql(url, "SELECT count(*) FROM ledger_auditevent").returncode == 0


@pytest.mark.django_db(transaction=True)
def test_the_app_serves_as_the_serving_role(workspace_and_token, serving_role, tmp_path, settings):
    workspace, token = workspace_and_token
    url, _ = serving_role
    assert database_url() != url
    server = Gunicorn(log_dir=tmp_path, env={"DATABASE_URL": url, "WEB_CONCURRENCY": "1"}).start()
    try:
        response = httpx.post(
            f"{server.url}/api/v1/events",
            headers={"Authorization": f"Bearer {token}"},
            json={"action": "prepare-brief", "delivery_id": "d-serving", "data": R42},
            timeout=30,
        )
    finally:
        server.stop()

    assert response.status_code in (200, 201, 202), response.text
    operation = Operation.objects.get(workspace=workspace)
    event = AuditEvent.objects.filter(operation=operation).get()
    assert event.kind == "reserved" and event.hash_key == settings.OPSCONSOLE_AUDIT_KEY_ID
    out = StringIO()
    call_command("verify_audit", "--no-heads", stdout=out)
    assert out.getvalue().splitlines()[-1].startswith("Audit trail intact:")


@pytest.mark.django_db(transaction=True)
def test_make_serve_refuses_to_serve_as_the_owner(serving_role):
    """``serving_role --check`` (run by ``make serve``): the superuser is refused, the role passes."""
    url, _ = serving_role
    check = [sys.executable, "manage.py", "serving_role", "--check"]
    env = {**os.environ, "SECRET_KEY": "k", "OPSCONSOLE_KEY_SECRET": "k", "OPSCONSOLE_AUDIT_KEY": "k"}

    as_owner = subprocess.run(
        check, cwd=PROJECT_DIR, env=env | {"DATABASE_URL": database_url()}, capture_output=True, text=True, timeout=120
    )
    as_role = subprocess.run(
        check, cwd=PROJECT_DIR, env=env | {"DATABASE_URL": url}, capture_output=True, text=True, timeout=120
    )

    assert as_owner.returncode == 1 and "is a superuser" in as_owner.stderr
    assert as_role.returncode == 0, as_role.stderr
