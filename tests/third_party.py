"""Third-party HTTP servers no one here wrote, started by the tests as real processes:
the destinations the configured HTTP actions are tested against.

- `json-server` 0.17.4: a REST API over a JSON file, with no idempotency: every POST creates
  (`running_json_server`).
- `stripe-stateful-mock` 0.0.16: Stripe's API in memory, which honours `Idempotency-Key` and refuses
  a reused key with other parameters (`running_stripe_mock`, through `tests/stripe_mock.cjs`).

Both come from the repository's package.json and package-lock.json (`make node_modules`, which `make
test` runs) and run under the `node` on PATH, each on a free 127.0.0.1 port in its own session:
`stop()` sends SIGTERM, then SIGKILLs the whole group, so nothing outlives the test. A start waits
until the server answers HTTP and fails (`ServerUnavailable`) quoting its log when it exits or does
not answer within 15 s. As with tests/signers.py, missing node_modules fail naming `make
node_modules`; only a machine without `node` skips, through `needs_node`.

Each server writes one JSON line per request it answered (`requests()`: method, path, status,
Idempotency-Key, start and end in epoch milliseconds; `tests/third_party_requests.cjs`), so a test
counts calls, rates and concurrency at the server; `fail_next` makes the next requests to a route meet a fault
(an answer dropped after acting, delayed, or refused). The pytest fixtures `json_server` (an empty
`tickets` resource) and `stripe_mock` (tests/conftest.py) wrap the context managers below.
"""

import json
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests import signers
from tests.faults.gunicorn import free_port
from tests.faults.qcluster import log_tail, stop_session, wait_for

ROOT = signers.ROOT
TESTS = Path(__file__).resolve().parent
REQUEST_LOG = TESTS / "third_party_requests.cjs"
STRIPE_MOCK = TESTS / "stripe_mock.cjs"
SERVER_PACKAGES = ("json-server", "stripe-stateful-mock")
START_TIMEOUT = 15
# Any secret key stripe-stateful-mock accepts: it checks only the `sk_test_` prefix. The mock keeps
# one set of objects per key (its "account"), so a test uses one key throughout.
STRIPE_TEST_KEY = "sk_test_opsconsole_third_party"

needs_node = signers.needs_node


class ServerUnavailable(RuntimeError):
    """A third-party server cannot start: no node, the locked packages missing, or it did not answer."""


class NodeServer:
    """One third-party server: a `node` process (its own session) on a free 127.0.0.1 port, its log
    and its request log in `directory`."""

    name = "server"
    ready_path = "/"

    def __init__(self, directory: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.directory = Path(directory) / f"{self.name}-{self.port}"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.log_path = self.directory / f"{self.name}.log"
        self.requests_path = self.directory / "requests.jsonl"
        self.faults_path = self.directory / "faults.json"
        self.process: subprocess.Popen | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if key != "NODE_OPTIONS"}
        env.update(
            {
                "THIRD_PARTY_REQUEST_LOG": str(self.requests_path),
                "THIRD_PARTY_FAULTS": str(self.faults_path),
                "NO_COLOR": "1",
                "FORCE_COLOR": "0",
            }
        )
        return env

    def start(self, *, timeout: float = START_TIMEOUT) -> "NodeServer":
        node = shutil.which("node")
        if node is None:
            raise ServerUnavailable(f"no `node` on PATH: {self.name} is an npm package (Node.js 20+)")
        signers.check_node_modules(SERVER_PACKAGES, needed_for="to run the test servers", error=ServerUnavailable)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [node, *self.command()],
                cwd=self.directory,
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            wait_for(
                self.answers,
                timeout=timeout,
                describe=self.log_tail,
                message=f"{self.name} did not answer on {self.url}",
            )
        except (AssertionError, ServerUnavailable) as error:
            self.stop()
            raise ServerUnavailable(str(error)) from None
        self.requests_path.unlink(missing_ok=True)  # the readiness probe's line: requests() holds the test's
        return self

    def answers(self) -> bool:
        if self.process.poll() is not None:
            raise ServerUnavailable(
                f"{self.name} exited with {self.process.returncode} before answering on {self.url}\n{self.log_tail()}"
            )
        try:
            httpx.get(f"{self.url}{self.ready_path}", timeout=2)
        except httpx.TransportError:
            return False
        return True  # any answer: stripe-stateful-mock answers 401 to a request without a key

    def stop(self, *, timeout: float = 10) -> None:
        if self.process is not None:
            stop_session(self.process, timeout=timeout)

    def requests(self) -> list[dict]:
        """The requests the server answered so far, in the order it answered them."""
        try:
            text = self.requests_path.read_text()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line]

    def fail_next(self, route: str, fault: str, *, times: int = 1, **details) -> None:
        """Make the next ``times`` requests to ``route`` ("POST /tickets") meet ``fault``:
        "drop_answer" (the server acts, then closes the connection unanswered), "delay_answer"
        (``ms``: it acts, then answers that much later) or "status" (``status``: answered so,
        before it acts; ``headers``: sent with it, e.g. Retry-After). Faults apply in the order they
        were added; tests/third_party_requests.cjs."""
        faults = json.loads(self.faults_path.read_text()) if self.faults_path.exists() else []
        faults.append({"route": route, "fault": fault, "times": times, **details})
        self.faults_path.write_text(json.dumps(faults))

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)


class JsonServer(NodeServer):
    """json-server 0.17 (its classic CLI): `db.json` in its directory holds `resources`, one list of
    objects per resource (`POST /tickets`, `GET /tickets?field=value`, `GET /tickets/{id}`; ids are
    integers from 1). `delay_ms` delays every answer (json-server's `--delay`)."""

    name = "json-server"
    ready_path = "/db"

    def __init__(self, directory: Path, *, resources: dict[str, list] | None = None, delay_ms: int | None = None):
        super().__init__(directory)
        self.db_path = self.directory / "db.json"
        self.db_path.write_text(json.dumps({"tickets": []} if resources is None else resources, indent=2))
        self.delay_ms = delay_ms

    def command(self) -> list[str]:
        package = ROOT / "node_modules" / "json-server"
        script = package / json.loads((package / "package.json").read_text())["bin"]
        args = [str(script), str(self.db_path), "--host", "127.0.0.1", "--port", str(self.port)]
        args += ["--middlewares", str(REQUEST_LOG)]
        if self.delay_ms:
            args += ["--delay", str(self.delay_ms)]
        return args

    def db(self) -> dict[str, list]:
        """What json-server holds: its state in memory (`GET /db`), which every answer it gave reflects.
        Not db.json, its copy on disk: a loaded CI run once read one ticket fewer there than the
        server had answered 201 for."""
        answer = httpx.get(f"{self.url}/db", headers={"X-Test-Harness": "db"}, timeout=10)
        return answer.raise_for_status().json()


class StripeMock(NodeServer):
    """stripe-stateful-mock: `/v1/customers`, `/v1/charges` and more, form-encoded, with
    `Authorization: Bearer sk_test_…` (`STRIPE_TEST_KEY`); its objects live in the process only."""

    name = "stripe-stateful-mock"

    def command(self) -> list[str]:
        return [str(STRIPE_MOCK)]

    def environment(self) -> dict[str, str]:
        # info: the mock logs a refused idempotent reuse with both bodies.
        return {**super().environment(), "PORT": str(self.port), "LOG_LEVEL": "info"}


@contextmanager
def running_json_server(directory: Path, resources: dict[str, list] | None = None, *, delay_ms: int | None = None):
    """A running json-server serving `resources` (default: an empty `tickets`); stopped on exit."""
    server = JsonServer(directory, resources=resources, delay_ms=delay_ms)
    try:
        yield server.start()
    finally:
        server.stop()


@contextmanager
def running_stripe_mock(directory: Path):
    """A running stripe-stateful-mock with no objects; stopped on exit."""
    server = StripeMock(directory)
    try:
        yield server.start()
    finally:
        server.stop()
