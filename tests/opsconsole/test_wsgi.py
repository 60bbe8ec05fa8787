"""The WSGI application gunicorn serves (``opsconsole.wsgi``): a worker is ready before its first request."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

# A Python process loads the WSGI application.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ROUTES = ("opsconsole.urls", "opsconsole.api.endpoints", "opsconsole.console.views")


def test_a_worker_has_its_routes_before_its_first_request():
    """Importing the application, as each gunicorn worker does while it boots, imports the URLconf
    and everything it names (the API's routes and models, the console's views). Left to the first
    request, that cost it ~250 ms after every start of every worker (bench/idle_latency.py with
    LATENCY_WARMUP=0). A fresh interpreter, as a worker is; no database is needed for it."""
    code = f"import sys; import opsconsole.wsgi; print([m for m in {ROUTES!r} if m in sys.modules])"
    env = os.environ | {
        "DEBUG": "0",
        "SECRET_KEY": "k",
        "OPSCONSOLE_KEY_SECRET": "ks",
        "OPSCONSOLE_AUDIT_KEY": "ak",
        "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/nowhere",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)

    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == repr(list(ROUTES))
