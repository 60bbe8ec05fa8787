"""The TypeScript client (clients/typescript, `opsconsole-client`) as a flow's script uses it: the
built package `npm pack`ed and installed into a folder of its own, with nothing else, and a plain
Node script there (tests/connectors/typescript_flow.mjs) run by the `node` on PATH (Node 20+).

- ``installed_client(directory)``: the folder, the tarball installed and the script copied in. Needs
  `make clients` (the client built: its dist/).
- ``Flow(directory, server_url, vendor_url, token, action)``: ``run(mode, data, **env)`` runs the
  script to its end and gives its JSON lines; ``start(mode, data, **env)`` gives the running
  ``FlowProcess``, whose lines a reader thread collects (``wait_for_line``), to SIGKILL or wait for.
"""

import json
import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path

from tests.connectors import packages
from tests.faults.qcluster import PROJECT_DIR, wait_for

CLIENT = PROJECT_DIR / "clients" / "typescript"
SCRIPT = Path(__file__).with_name("typescript_flow.mjs")
RUN_TIMEOUT = 180


class ClientUnavailable(RuntimeError):
    """The client cannot be installed: not built, no node, or npm failed."""


def installed_client(directory: Path) -> Path:
    """``directory`` made a Node package with the client's tarball installed and the flow script."""
    if shutil.which("node") is None:
        raise ClientUnavailable("no `node` on PATH: the TypeScript client runs on Node.js 20+")
    if not (CLIENT / "dist" / "esm" / "index.js").exists() or not (CLIENT / "dist" / "cjs" / "index.js").exists():
        raise ClientUnavailable(f"{CLIENT} is not built (no dist/): run `make clients`")
    tarball = packages.pack(CLIENT, directory)
    installed = packages.install(tarball, directory, package={"name": "a-flow", "private": True, "type": "module"})
    if installed.returncode != 0:
        raise ClientUnavailable(f"npm install of {tarball.name} failed:\n{installed.stderr[-2000:]}")
    shutil.copy(SCRIPT, directory / SCRIPT.name)
    return directory


class Flow:
    def __init__(self, directory: Path, *, server_url: str, vendor_url: str, token: str, action: str):
        self.directory = directory
        self.env = {key: value for key, value in os.environ.items() if key != "NODE_OPTIONS"} | {
            "OPSCONSOLE_URL": server_url,
            "OPSCONSOLE_TOKEN": token,
            "VENDOR_URL": vendor_url,
            "ACTION": action,
        }

    def _command(self, mode: str, data: dict | list) -> list[str]:
        return ["node", SCRIPT.name, mode, json.dumps(data)]

    def run(self, mode: str, data: dict | list, **env: str) -> list[dict]:
        done = subprocess.run(
            self._command(mode, data),
            cwd=self.directory,
            env=self.env | env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
        )
        assert done.returncode == 0, f"the flow script exited with {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return _lines(done.stdout)

    def start(self, mode: str, data: dict, **env: str) -> "FlowProcess":
        return FlowProcess(
            subprocess.Popen(
                self._command(mode, data),
                cwd=self.directory,
                env=self.env | env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )


class FlowProcess:
    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.lines: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.extend(_lines(line))

    def wait_for_line(self, predicate, *, message: str, timeout: float = 60) -> dict:
        def found():
            if self.process.poll() is not None and not any(predicate(line) for line in self.lines):
                self._reader.join(timeout=5)
                if not any(predicate(line) for line in self.lines):
                    exited = self.process.returncode
                    raise AssertionError(f"{message}: the script exited with {exited}: {self.output()}")
            return next((line for line in self.lines if predicate(line)), None)

        return wait_for(found, timeout=timeout, message=message, describe=self.output)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def finish(self, *, timeout: float = RUN_TIMEOUT) -> list[dict]:
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=10)
        assert code == 0, f"the flow script exited with {code}: {self.output()}"
        return self.lines

    def output(self) -> str:
        stderr = self.process.stderr.read() if self.process.poll() is not None else ""
        return f"lines {self.lines}\n{stderr[-2000:]}"


def _lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]
