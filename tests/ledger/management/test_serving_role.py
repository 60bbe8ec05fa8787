"""The app serves as a role that owns nothing (``manage.py serving_role``): through raw psql it cannot
turn the audit trail's triggers off, TRUNCATE it, change or delete its rows, or replace its hash
functions; and the app works as it (an event submitted through the API of a real gunicorn). The
command works as docs/operations.md says to run it, as an owner that is no superuser (on the
server the tests run on: `DATABASE_URL=... make test` runs them on another PostgreSQL)."""

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

# psql, manage.py (a migrate) and a gunicorn as processes of their own.
pytestmark = pytest.mark.slow

REFUSED = [
    ("ALTER TABLE ledger_auditevent DISABLE TRIGGER ledger_auditevent_append_only", "must be owner of table"),
    ("ALTER TABLE ledger_auditevent DISABLE TRIGGER ALL", "must be owner of table"),
    ("SET session_replication_role = replica", "permission denied to set parameter"),
    ("TRUNCATE ledger_auditevent", "permission denied for table ledger_auditevent"),
    ("UPDATE ledger_auditevent SET message = 'nothing to see'", "permission denied for table ledger_auditevent"),
    ("DELETE FROM ledger_auditevent", "permission denied for table ledger_auditevent"),
    ("UPDATE ledger_auditinstallation SET keyed_since = now()", "permission denied for table ledger_auditinstallation"),
    ("INSERT INTO ledger_auditinstallation VALUES (2, gen_random_uuid(), now())", "permission denied for table"),
    (
        "CREATE OR REPLACE FUNCTION ledger_audit_head(a bigint, b bigint[], c boolean) RETURNS jsonb "
        "LANGUAGE sql AS $$ SELECT '[]'::jsonb $$",
        "permission denied for schema public|must be owner of function",
    ),
    ("DROP TRIGGER ledger_auditevent_no_truncate ON ledger_auditevent", "must be owner of"),
    # The trail's partitions: none of their own grants, and only the owner makes or takes one.
    ("TRUNCATE ledger_auditevent_default", "permission denied for table ledger_auditevent_default"),
    ("DELETE FROM ledger_auditevent_default", "permission denied for table ledger_auditevent_default"),
    ("ALTER TABLE ledger_auditevent DETACH PARTITION ledger_auditevent_default", "must be owner of table"),
    # Creating the table is refused before attaching it would be (no CREATE on the schema).
    ("SELECT ledger_audit_partitions(now() + interval '10 years', 1)", "permission denied for schema public"),
    # The deliveries' and attempts' ranges: made and dropped only by the owner's functions, on their terms.
    ("ALTER TABLE ledger_delivery DETACH PARTITION ledger_delivery_default", "must be owner of table"),
    ("DROP TABLE ledger_attempt_default", "must be owner of table"),
    ("SELECT ledger_operation_partitions(1000, 100000000)", "permission denied for schema public"),
    ("SELECT ledger_drop_operation_range(0)", "not all made yet|no range of operations begins at 0"),
    (
        "INSERT INTO ledger_auditarchive (partition, ends, events, chains, file_name, file_sha256, key_id, mac, "
        "archived_at) VALUES ('p', now(), 0, '{}', 'f', '', '', '', now())",
        "permission denied for table ledger_auditarchive",
    ),
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


def manage(*args: str, url: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SECRET_KEY": "k", "OPSCONSOLE_KEY_SECRET": "k", "OPSCONSOLE_AUDIT_KEY": "k"}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT_DIR,
        env=env | {"DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=300,
    )


def url_of(role: str, database: str, password: str = "") -> str:
    settings = connection.settings_dict
    auth = f"{role}:{quote(password, safe='')}" if password else role
    return f"postgres://{auth}@{settings.get('HOST') or '127.0.0.1'}:{settings.get('PORT') or 5432}/{database}"


@pytest.fixture
def owner_database(db):
    """A database, migrated by its owner: a login role with CREATEROLE that is no superuser, as a
    managed PostgreSQL's admin role is. Returns the owner's URL; dropped afterwards, with the roles
    made in it (their names start with the owner's)."""
    owner = f"oc_owner_{secrets.token_hex(4)}"
    password = secrets.token_urlsafe(18)
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {owner} LOGIN CREATEROLE PASSWORD %s", [password])
        cursor.execute(f"CREATE DATABASE {owner} OWNER {owner}")
    url = url_of(owner, owner, password)
    try:
        migrated = manage("migrate", "--no-input", url=url)
        assert migrated.returncode == 0, migrated.stderr[-3000:]
        yield owner, url
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {owner} WITH (FORCE)")
            cursor.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE %s", [f"{owner}%"])
            for (role,) in sorted(cursor.fetchall(), reverse=True):  # the owner last
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
    # What the sweep does as this role: the next ranges of operations, made by the owner's function.
    made = psql(url, "SELECT ledger_operation_partitions_ahead()")
    assert made.returncode == 0, made.stderr


@pytest.mark.processes
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
    assert event.kind == "reserved"
    assert event.hash_key == settings.OPSCONSOLE_AUDIT_KEY_ID
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

    assert as_owner.returncode == 1
    assert "is a superuser" in as_owner.stderr
    assert as_role.returncode == 0, as_role.stderr


@pytest.mark.django_db(transaction=True)
def test_the_owner_makes_and_updates_the_serving_role_without_being_a_superuser(owner_database):
    """The owner runs it after each migrate (docs/operations.md): the first run makes the role, the
    next ones update it (a new password) and its grants; the app then serves as it."""
    owner, owner_url = owner_database
    role, password = f"{owner}_app", secrets.token_urlsafe(18)

    made = manage("serving_role", role, f"--password={password}", url=owner_url)
    again = manage("serving_role", role, f"--password={password}x", url=owner_url)
    unchanged = manage("serving_role", role, url=owner_url)

    assert made.returncode == 0, made.stderr
    assert f"Created role {role}" in made.stdout, made.stderr
    assert again.returncode == 0, again.stderr
    assert f"Updated role {role}" in again.stdout, again.stderr
    assert unchanged.returncode == 0, unchanged.stderr
    assert f"Updated role {role}" in unchanged.stdout, unchanged.stderr
    serving_url = url_of(role, owner, password + "x")
    checked = manage("serving_role", "--check", url=serving_url)
    assert checked.returncode == 0, checked.stderr
    assert f"Serving as {role}" in checked.stdout, checked.stderr
    assert psql(serving_url, "SELECT count(*) FROM ledger_operation").returncode == 0
    assert "permission denied" in psql(serving_url, "TRUNCATE ledger_auditevent").stderr
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT rolcanlogin, rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls "
            "FROM pg_roles WHERE rolname = %s",
            [role],
        )
        assert cursor.fetchone() == (True, False, False, False, False, False)


@pytest.mark.django_db(transaction=True)
def test_it_says_which_role_must_run_it_when_the_owner_may_not(owner_database):
    """Where the owner lacks a privilege the command needs, it changes nothing, exits 1 and names
    who may run it. A role someone else made: on PostgreSQL 16+ only its maker (or a role with ADMIN
    OPTION on it) may change its password; its grants need no more than owning the tables."""
    owner, owner_url = owner_database
    made_by_another, stranger = f"{owner}_theirs", f"{owner}_stranger"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {made_by_another} LOGIN")
        cursor.execute(f"CREATE ROLE {stranger} LOGIN PASSWORD 'stranger'")
        cursor.execute("SELECT current_setting('server_version_num')::int >= 160000")
        [admin_option_needed] = cursor.fetchone()

    granted = manage("serving_role", made_by_another, url=owner_url)
    new_password = manage("serving_role", made_by_another, "--password=p4ssword", url=owner_url)
    by_a_stranger = manage("serving_role", f"{owner}_app", url=url_of(stranger, owner, "stranger"))
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER ROLE {owner} NOCREATEROLE")
    without_createrole = manage("serving_role", f"{owner}_app", url=owner_url)

    assert granted.returncode == 0, granted.stderr
    if admin_option_needed:
        assert new_password.returncode == 1
        assert f"Could not change role {made_by_another} (permission denied to alter role" in new_password.stderr, (
            new_password.stderr
        )
        assert (
            f"Run it as a superuser, or as {owner} (the owner of the tables) with CREATEROLE (on PostgreSQL "
            f"16+ also ADMIN OPTION on {made_by_another})." in new_password.stderr
        ), new_password.stderr
    else:
        assert new_password.returncode == 0, new_password.stderr  # PostgreSQL 15: CREATEROLE is enough
    assert by_a_stranger.returncode == 1
    assert (
        f"Run it as {owner}, the owner of the tables, or as a superuser: {stranger} is neither." in by_a_stranger.stderr
    )
    assert without_createrole.returncode == 1
    assert f"Could not create role {owner}_app (permission denied to create role" in without_createrole.stderr, (
        without_createrole.stderr
    )
    assert (
        f"Run it as a superuser, or as {owner} (the owner of the tables) with CREATEROLE." in without_createrole.stderr
    ), without_createrole.stderr
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_roles WHERE rolname = %s", [f"{owner}_app"])
        assert cursor.fetchone() == (0,)
