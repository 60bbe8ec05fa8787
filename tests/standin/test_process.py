import ast
import selectors
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import standin

# The stand-in as a process of its own.
pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


def read_line(stream, *, timeout):
    """Reads one line from a pipe, failing the test instead of hanging when none comes."""
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        assert selector.select(timeout), f"no line on stdout within {timeout}s"
    return stream.readline()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_it_runs_as_a_process_on_a_free_port_until_signalled(signum):
    """`python -m standin --port 0` prints its real URL once ready, answers, and exits cleanly on a signal."""
    process = subprocess.Popen(
        [sys.executable, "-m", "standin", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = read_line(process.stdout, timeout=10)
        assert line.startswith("standin listening on http://127.0.0.1:"), line
        base_url = line.split()[-1]
        assert not base_url.endswith(":0")

        assert httpx.get(f"{base_url}/health", timeout=5).json() == {"ok": True}

        process.send_signal(signum)
        assert process.wait(timeout=10) == 0
        assert process.stderr.read() == ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        process.stdout.close()
        process.stderr.close()


def test_it_imports_only_the_standard_library():
    """The stand-in plays another company's API: no Django, no third-party packages, no project code."""
    package = Path(standin.__file__).parent
    imported = set()
    for source in package.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.split(".")[0])

    assert imported - set(sys.stdlib_module_names) == {"standin"}
