"""The commands the demo prints work as printed, from the checkout, in a shell with none of the
project's settings in its environment (a person's terminal)."""

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import httpx
import psycopg
import pytest
from django.conf import settings

from opsconsole import embedded_db
from opsconsole.management.commands.demo_setup import DEMO_MANAGE, HOOK_SECRET_ENV, demo_manage, webhook_command
from tests.faults.gunicorn import free_port
from tests.faults.qcluster import database_url, wait_for

CHECKOUT = Path(__file__).resolve().parents[2]
VENV_PYTHON = CHECKOUT / ".venv" / "bin" / "python"
# What `make demo` exports to demo_setup and the server, read from the Makefile itself: the billing
# source's signing secret.
MAKE_DEMO_ENV = {HOOK_SECRET_ENV: re.search(rf"{HOOK_SECRET_ENV} \?= (\S+)", (CHECKOUT / "Makefile").read_text())[1]}


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
def demo_port():
    return free_port()


@pytest.fixture(scope="module")
def demo(demo_database, demo_port):
    """The demo's database, set up as `make demo` does (for a server on ``demo_port``); what
    demo_setup printed, and the environment of a person's other terminal."""
    if not VENV_PYTHON.exists():
        pytest.skip(f"needs the project's virtualenv at {VENV_PYTHON} (make venv): the demo's commands name it")
    env = _shell_env(demo_database)
    for step in ("migrate --noinput", f"demo_setup --url http://127.0.0.1:{demo_port}/"):
        done = _run(f"DEBUG=1 {VENV_PYTHON} manage.py {step}", env | MAKE_DEMO_ENV)
        assert done.returncode == 0, done.stderr
    return env, done.stdout


@pytest.fixture(scope="module")
def demo_server(demo, demo_port):
    """The demo's web server as `make demo` runs it (runserver, DEBUG on, the Makefile's secret)."""
    env, _ = demo
    server = subprocess.Popen(
        [str(VENV_PYTHON), "manage.py", "runserver", f"127.0.0.1:{demo_port}", "--noreload"],
        cwd=CHECKOUT,
        env=env | MAKE_DEMO_ENV | {"DEBUG": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )

    def answers():
        if server.poll() is not None:
            raise AssertionError(f"runserver exited with {server.returncode}: {server.stderr.read().decode()}")
        try:
            return httpx.get(f"http://127.0.0.1:{demo_port}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(answers, timeout=60, message=f"runserver did not answer on port {demo_port}")
        yield
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)


def _printed(printed: str, label: str) -> str:
    [line] = [line.removeprefix(label).strip() for line in printed.splitlines() if line.startswith(label)]
    return line.split("   (")[0]


# The demo's database is migrated and set up by manage.py processes, once for the module.
@pytest.mark.slow
def test_it_prints_the_approve_command_that_approves_the_refund(demo):
    env, printed = demo
    [approve] = [line.removeprefix("Approve:").strip() for line in printed.splitlines() if line.startswith("Approve:")]
    assert ".venv/bin/python manage.py approve" in approve

    done = _run(approve, env)

    assert done.returncode == 0, done.stderr
    assert "demo:R-42:v3:issue-refund is now pending." in done.stdout  # approved: on its way to run


@pytest.mark.slow
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


@pytest.mark.slow
def test_it_prints_a_claim_a_caller_can_send_and_leaves_one_claim_that_will_expire(
    demo, workspace, send_invoice_action
):
    """The printed curl body claims a send-invoice (docs/claims.md; the demo's integrations file
    declares it); the demo's own INV-1 claim is held by a caller that never reports, for the console
    to show its lease expiring into unknown."""
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


@pytest.mark.processes
def test_the_printed_webhook_lands_as_an_operation_and_sent_again_is_a_duplicate(demo, demo_server):
    """The sender signs an invoice.paid with the demo's secret; the billing source maps it onto
    fulfil-invoice. Run from a person's terminal, which has neither the secret nor any setting."""
    env, printed = demo
    command = _printed(printed, "Webhook:")
    assert command.startswith(".venv/bin/python -m opsconsole.send_webhook ")

    first, again = _run(command, env), _run(command, env)

    assert (first.returncode, first.stdout.split("\n")[0]) == (0, "201 Created"), first.stdout + first.stderr
    assert _answer(first.stdout)["key"] == "demo:INV-7:fulfil-invoice"
    assert (again.returncode, again.stdout.split("\n")[0]) == (0, "200 OK"), again.stdout + again.stderr
    assert _answer(again.stdout)["status"] == "duplicate"


def _answer(stdout: str) -> dict:
    """The answer's body the sender printed under its status line."""
    return json.loads(stdout.split("\n", 1)[1])


@pytest.mark.processes
def test_the_printed_webhook_is_taken_because_of_its_secret(demo, demo_server):
    """Control: the same command with another secret is refused, so the test above passes because
    the server checks the signature the demo's secret makes."""
    env, printed = demo
    command = _printed(printed, "Webhook:").replace(MAKE_DEMO_ENV[HOOK_SECRET_ENV], "whsec_b3RoZXIgc2VjcmV0")

    done = _run(command, env)

    assert (done.returncode, done.stdout.split("\n")[0]) == (1, "401 Unauthorized")
    assert _answer(done.stdout)["reason"] == "bad_signature"


def test_without_the_secret_in_its_environment_it_prints_how_to_set_it(monkeypatch):
    monkeypatch.delenv(HOOK_SECRET_ENV, raising=False)

    assert webhook_command("http://127.0.0.1:8000/").startswith(f"off (set {HOOK_SECRET_ENV} ")


@pytest.mark.slow
def test_a_second_demo_setup_is_quiet_keeps_the_example_and_ends_with_the_url_and_a_token(demo, demo_port):
    """`make demo` again on the kept database: the example is not sent again (no duplicate
    deliveries), a few lines, the console's URL, the users and a fresh token at the end."""
    env, first = demo
    with psycopg.connect(env["DATABASE_URL"]) as db:
        deliveries = db.execute("SELECT count(*) FROM ledger_delivery").fetchone()[0]

    again = _run(f"DEBUG=1 {VENV_PYTHON} manage.py demo_setup --url http://127.0.0.1:{demo_port}/", env | MAKE_DEMO_ENV)

    assert again.returncode == 0, again.stderr
    lines = again.stdout.splitlines()
    assert "Submitting the R-42 example:" in first
    assert "Submitting the R-42 example:" not in again.stdout
    assert lines[0].startswith("Workspace demo set up before: ")
    assert "operations kept" in lines[0]
    assert len(lines) < 20
    assert f"Console:  http://127.0.0.1:{demo_port}/console/   users: admin, operator, approver" in again.stdout
    assert lines[-1].startswith("API token for workspace demo: oc_")
    assert lines[-1] != first.splitlines()[-1]  # a fresh token
    with psycopg.connect(env["DATABASE_URL"]) as db:
        assert db.execute("SELECT count(*) FROM ledger_delivery").fetchone()[0] == deliveries


@pytest.mark.slow
def test_demo_drafts_lists_a_few_of_each_and_counts_the_rest(workspace):
    """After a day of thousands, a second `make demo` lists five drafts and says how many more, so
    the URL and the token demo_setup printed stay in sight."""
    import io

    from django.core.management import call_command

    from ledger.engine.processing import process_due_operations
    from ledger.intake import submit
    from ledger.models import Delivery
    from tests.conftest import R42

    for version in range(1, 9):
        submit.submit_event(
            workspace=workspace,
            raw={"action": "prepare-brief", "data": R42 | {"version": version}},
            source=Delivery.Source.CLI,
        )
    process_due_operations(worker="w1")
    out = io.StringIO()

    call_command("demo_drafts", wait=0, stdout=out)

    printed = out.getvalue()
    assert printed.count("Prepared by the qcluster: draft-") == 5
    assert "  ... and 3 more drafts" in printed
    assert printed.splitlines()[-1].startswith("Dashboard: ")


@pytest.mark.slow
def test_demo_drafts_does_not_wait_for_a_callers_claim_and_says_why(workspace, send_invoice_action):
    """The demo's INV-1 is claimed by a caller that never reports: no work of the cluster's. With
    nothing else to do, demo_drafts does not wait for it (no "still wait" line however long it may
    wait) and says what becomes of it; the cluster's own work left undone is still reported."""
    import io

    from django.core.management import call_command

    from ledger.callers import claims
    from ledger.intake import submit
    from ledger.models import Delivery
    from opsconsole.management.commands.demo_setup import INVOICE
    from tests.conftest import R42

    claims.claim(
        workspace=workspace,
        raw={"action": "send-invoice", "data": INVOICE, "lease_seconds": 5},
        submitted_by="demo-flow",
    )
    out = io.StringIO()

    call_command("demo_drafts", wait=30, stdout=out)

    printed = out.getvalue()
    assert "still wait" not in printed
    assert (
        "INV-1 is claimed by a caller that never reports (demo-flow): it will show as unknown when its lease ends"
        in printed
    )

    submit.submit_event(workspace=workspace, raw={"action": "prepare-brief", "data": R42}, source=Delivery.Source.CLI)
    out = io.StringIO()

    call_command("demo_drafts", wait=0, stdout=out)  # no cluster runs here: the brief stays pending

    assert "1 operation(s) the qcluster should have worked still wait after 0 s: is the qcluster running?" in (
        out.getvalue()
    )
