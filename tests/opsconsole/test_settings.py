"""Settings come from the environment and refuse unsafe defaults."""

import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]


def load_settings(**env):
    """Import the settings module in a fresh interpreter with exactly these variables."""
    clean = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG", "DATABASE_URL"}}
    return subprocess.run(
        [sys.executable, "-c", "import opsconsole.settings as s; print(s.DATABASES['default']['ENGINE'])"],
        cwd=ROOT, env=clean | env, capture_output=True, text=True, timeout=60,
    )


def test_it_refuses_to_start_without_a_secret_key_when_debug_is_off():
    result = load_settings(DEBUG="0")
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off." in result.stderr


def test_it_uses_a_development_key_only_with_debug_on():
    result = load_settings(DEBUG="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "django.db.backends.sqlite3"


def test_it_reads_the_database_from_database_url():
    result = load_settings(SECRET_KEY="k", DATABASE_URL="postgres://postgres@127.0.0.1:5432/elsewhere")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "django.db.backends.postgresql"


def test_it_keeps_connections_and_puts_the_queue_on_the_default_database():
    assert settings.DATABASES["default"]["CONN_MAX_AGE"] > 0
    assert settings.Q_CLUSTER.get("orm") == "default"
    assert settings.Q_CLUSTER["save_limit"] == -1
