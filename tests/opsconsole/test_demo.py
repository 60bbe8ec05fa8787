"""The commands the demo prints work as printed, from the checkout, in a shell with none of the
project's settings in its environment (a person's terminal)."""

import os
import subprocess
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

from ledger.management.commands.demo_setup import DEMO_MANAGE, demo_manage
from opsconsole import embedded_db
from tests.faults.qcluster import database_url

CHECKOUT = Path(__file__).resolve().parents[2]
VENV_PYTHON = CHECKOUT / ".venv" / "bin" / "python"


def _shell_env(url: str) -> dict:
    """A person's environment: no SECRET_KEY, DEBUG or settings module; only the database is moved
    aside, so that the checkout's own demo database is not touched."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DJANGO_", "SECRET_KEY", "DEBUG", "DATABASE_URL", "OPSCONSOLE_"))
    }
    env["DATABASE_URL"] = url
    return env


def _run(command: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(command, shell=True, cwd=CHECKOUT, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def demo_database():
    """A scratch database beside the test database, on its server (the embedded one under `make
    test`), dropped after."""
    server = settings.DATABASES["default"]
    name = f"test_{server['NAME']}_demo"
    admin = database_url({**server, "NAME": "postgres"})
    with psycopg.connect(admin, autocommit=True) as db:
        db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        db.execute(f'CREATE DATABASE "{name}"')
    yield database_url({**server, "NAME": name})
    with psycopg.connect(admin, autocommit=True) as db:
        db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def demo(demo_database):
    """The demo's database, set up as `make demo` does; what demo_setup printed."""
    if not VENV_PYTHON.exists():
        pytest.skip(f"needs the project's virtualenv at {VENV_PYTHON} (make venv): the demo's commands name it")
    env = _shell_env(demo_database)
    for step in ("migrate --noinput", "demo_setup"):
        done = _run(f"DEBUG=1 {VENV_PYTHON} manage.py {step}", env)
        assert done.returncode == 0, done.stderr
    return env, done.stdout


def test_it_prints_the_approve_command_that_approves_the_refund(demo):
    env, printed = demo
    [approve] = [line.removeprefix("Approve:").strip() for line in printed.splitlines() if line.startswith("Approve:")]
    assert ".venv/bin/python manage.py approve" in approve

    done = _run(approve, env)

    assert done.returncode == 0, done.stderr
    assert "demo:R-42:v3:issue-refund is now pending." in done.stdout  # approved: on its way to run


def test_the_printed_command_needs_its_debug_setting(demo):
    """Control: without the DEBUG=1 it prints, the command stops on the secret key check; so the
    test above passes because of what the demo prints, not because settings are lax."""
    env, printed = demo
    [approve] = [line.removeprefix("Approve:").strip() for line in printed.splitlines() if line.startswith("Approve:")]

    done = _run(approve.replace("DEBUG=1 ", ""), env)

    assert done.returncode != 0
    assert "SECRET_KEY" in done.stderr


def test_on_the_embedded_server_the_printed_command_names_its_database(monkeypatch):
    """`make demo` on the embedded PostgreSQL: a person's other terminal has no DATABASE_URL, so the
    printed command carries the URL of this run's server; a DATABASE_URL the person gave is not
    repeated (it may hold a password, and their shell has it)."""
    monkeypatch.setattr(embedded_db, "running_port", lambda: 55999)
    monkeypatch.setenv("DATABASE_URL", embedded_db.url(55999))
    assert demo_manage() == f"DATABASE_URL=postgres://postgres@127.0.0.1:55999/opsconsole {DEMO_MANAGE}"

    monkeypatch.setenv("DATABASE_URL", "postgres://me:secret@db.internal:5432/opsconsole")
    assert demo_manage() == DEMO_MANAGE
    monkeypatch.setattr(embedded_db, "running_port", lambda: None)
    assert demo_manage() == DEMO_MANAGE


def test_it_prints_a_claim_a_caller_can_send_and_leaves_one_claim_that_will_expire(demo, workspace):
    """The printed curl body claims a send-invoice (docs/claims.md); the demo's own INV-1 claim is
    held by a caller that never reports, for the console to show its lease expiring into unknown."""
    import json
    import shlex

    from ledger.callers import claims

    _, printed = demo
    [line] = [line.removeprefix("Claim:").strip() for line in printed.splitlines() if line.startswith("Claim:")]
    words = shlex.split(line.split("   (")[0])
    body = json.loads(words[words.index("-d") + 1])
    assert words[-1].endswith("/api/v1/claims")

    assert claims.claim(workspace=workspace, raw=body, submitted_by="test").status == claims.CLAIMED
    assert "claim of INV-1 by demo-flow: claimed" in printed
