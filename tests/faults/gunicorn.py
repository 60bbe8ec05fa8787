"""Start and stop a real gunicorn (``make serve``'s configuration, opsconsole/gunicorn.conf.py)
against the database this process uses, the way ``tests/faults/qcluster.py`` does for clusters.

gunicorn runs in its own session: ``stop()`` sends SIGTERM to the master (a graceful stop) and
SIGKILLs the whole group if it outlives the timeout, so no worker outlives the test.
"""

import json
import os
import runpy
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import httpx
from django.conf import settings

from tests.faults.qcluster import PROJECT_DIR, database_url, log_tail, stop_session, wait_for

CONFIG = PROJECT_DIR / "opsconsole" / "gunicorn.conf.py"
# Never inherited: the server under test runs as `make serve` would, on plain HTTP.
_NOT_INHERITED = ("DEBUG", "OPSCONSOLE_SECURE", "BIND", "WEB_CONCURRENCY", "CONN_MAX_AGE", "GUNICORN_CMD_ARGS")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def configured_workers() -> int:
    """How many workers ``make serve`` starts on this machine (the configuration's own arithmetic)."""
    with mock.patch.dict(os.environ):
        os.environ.pop("WEB_CONCURRENCY", None)
        config = runpy.run_path(str(CONFIG))
    return config["workers"] * config.get("threads", 1)


class Gunicorn:
    def __init__(
        self,
        *,
        log_dir: Path,
        env: dict[str, str] | None = None,
        app: str = "opsconsole.wsgi",
        ready_path: str = "/accounts/login/",
        tree: Path = PROJECT_DIR,
    ):
        # ``app`` and ``ready_path``: another WSGI application under the same configuration (the
        # bench's peers, bench/powertools_server.py), and a GET that answers 200 once it serves.
        # ``tree``: the checkout served, with its own configuration (bench/profile_request.py
        # serves two side by side).
        self.app = app
        self.ready_path = ready_path
        self.tree = Path(tree)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_dir) / ("gunicorn.log" if app == "opsconsole.wsgi" else f"gunicorn-{app}.log")
        self.env = {key: value for key, value in os.environ.items() if key not in _NOT_INHERITED}
        self.env.update(
            {
                "DATABASE_URL": database_url(),
                "SECRET_KEY": settings.SECRET_KEY,  # the cluster signs tasks with it too
                "OPSCONSOLE_KEY_SECRET": settings.OPSCONSOLE_KEY_SECRET,  # keys of sensitive identity fields
                "OPSCONSOLE_AUDIT_KEY": settings.OPSCONSOLE_AUDIT_KEY,  # the audit chain's, as the tests verify it
                "OPSCONSOLE_AUDIT_KEY_ID": settings.OPSCONSOLE_AUDIT_KEY_ID,
                # The stand-in and the test servers listen on 127.0.0.1 (ledger.actions.egress).
                "OPSCONSOLE_EGRESS_ALLOW_PRIVATE": "1" if settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE else "0",
                "DJANGO_SETTINGS_MODULE": "opsconsole.settings",
                "BIND": f"127.0.0.1:{self.port}",
                "LEDGER_LOG_LEVEL": "WARNING",
                "PYTHONUNBUFFERED": "1",
            }
        )
        self.env.update(env or {})
        self.process: subprocess.Popen | None = None

    def start(self, *, timeout: float = 30) -> "Gunicorn":
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "-c", str(self.tree / CONFIG.relative_to(PROJECT_DIR)), self.app],
                cwd=self.tree,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(
            self.answers, timeout=timeout, describe=self.log_tail, message=f"gunicorn did not answer on {self.url}"
        )
        return self

    def answers(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"gunicorn exited with {self.process.returncode}\n{self.log_tail()}")
        try:
            return httpx.get(f"{self.url}{self.ready_path}", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self, *, timeout: float = 30) -> None:
        if self.process is not None:
            stop_session(self.process, timeout=timeout)

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)

    def access_lines(self) -> list[dict]:
        """The access log so far (opsconsole.access: one JSON line per request answered, written
        before the answer leaves), in order: which routes a client's requests went to."""
        lines = []
        for text in self.log_path.read_text(errors="replace").splitlines():
            try:
                line = json.loads(text)
            except ValueError:
                continue  # gunicorn's own lines
            if isinstance(line, dict) and line.get("logger") == "opsconsole.access":
                lines.append(line)
        return lines


@contextmanager
def running_gunicorn(log_dir: Path, **options):
    server = Gunicorn(log_dir=log_dir, **options)
    try:
        yield server.start()
    finally:
        server.stop()
