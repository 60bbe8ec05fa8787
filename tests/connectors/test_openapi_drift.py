"""The published OpenAPI document (clients/openapi.json) and the TypeScript client's types generated
from it (clients/typescript/src/openapi.ts) are what the app serves now: a change of the API that
was not regenerated fails here, naming the command that regenerates both (`make clients-openapi`).
And every route the TypeScript client calls is in the document.
"""

import difflib
import importlib.util
import json
import re
import subprocess

import pytest

from tests.faults.qcluster import PROJECT_DIR

DOCUMENT = PROJECT_DIR / "clients" / "openapi.json"
CLIENT = PROJECT_DIR / "clients" / "typescript"
TYPES = CLIENT / "src" / "openapi.ts"
GENERATOR = CLIENT / "node_modules" / ".bin" / "openapi-typescript"
REGENERATE = "run `make clients-openapi` and commit clients/openapi.json and clients/typescript/src/openapi.ts"


def _exporter():
    """scripts/openapi.py, the one place the document's form is written (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("openapi_export", PROJECT_DIR / "scripts" / "openapi.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _diff(committed: str, current: str, names: tuple[str, str]) -> str:
    lines = difflib.unified_diff(committed.splitlines(), current.splitlines(), *names, lineterm="", n=2)
    return "\n".join(list(lines)[:60])


def test_the_committed_document_is_what_the_app_publishes(client):
    exporter = _exporter()
    response = client.get(exporter.ROUTE)
    assert response.status_code == 200
    current = exporter.as_committed(response.json())
    committed = DOCUMENT.read_text(encoding="utf-8")
    assert committed == current, f"clients/openapi.json is not what {exporter.ROUTE} serves: {REGENERATE}\n" + _diff(
        committed, current, ("clients/openapi.json", exporter.ROUTE)
    )


def test_every_route_the_typescript_client_calls_is_in_the_document():
    """Each path literal of the client's source, up to its first interpolation (a key or an id), is a
    published path or the start of one. (Its management methods are typed by the document's paths as
    well: a route removed from it fails the client's build. The Python client's routes, parameters
    and fields are checked by test_python_client_openapi.py.)"""
    paths = sorted(json.loads(DOCUMENT.read_text())["paths"])
    files = [path for path in (CLIENT / "src").glob("*.ts") if path != TYPES]
    literals = re.findall(r"[`\"](/api/v1/[^`\"?]*)", "\n".join(path.read_text() for path in files))
    called = {literal.split("${")[0] for literal in literals}
    assert len(called) >= 10, f"the client's routes were not found in its source: {called}"
    missing = sorted(
        prefix
        for prefix in called
        if not any(path == prefix or (prefix.endswith("/") and path.startswith(prefix)) for path in paths)
    )
    assert not missing, f"the TypeScript client calls routes the app does not publish: {missing}"


@pytest.mark.processes
def test_the_typescript_types_are_generated_from_the_committed_document(tmp_path):
    if not GENERATOR.exists():
        pytest.fail(f"no {GENERATOR.relative_to(PROJECT_DIR)}: run `make clients` (npm ci of clients/typescript)")
    generated = tmp_path / "openapi.ts"
    run = subprocess.run(
        [str(GENERATOR), str(DOCUMENT), "--output", str(generated)],
        cwd=CLIENT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    committed = TYPES.read_text(encoding="utf-8")
    current = generated.read_text(encoding="utf-8")
    assert committed == current, (
        f"clients/typescript/src/openapi.ts is not generated from clients/openapi.json: {REGENERATE}\n"
        + _diff(committed, current, ("src/openapi.ts", "generated"))
    )
