"""One switch, OPSCONSOLE_SECURE=1, makes `manage.py check --deploy` clean."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

# Each check runs manage.py as a process of its own.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def check_deploy(**env) -> subprocess.CompletedProcess:
    """`manage.py check --deploy` in a fresh process with production-like variables and ``env``."""
    clean = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DEBUG", "DATABASE_URL", "ALLOWED_HOSTS"} and not key.startswith(("OPSCONSOLE_", "SECURE_"))
    }
    production = {
        "SECRET_KEY": secrets.token_urlsafe(50),
        "OPSCONSOLE_KEY_SECRET": secrets.token_urlsafe(50),
        "OPSCONSOLE_AUDIT_KEY": secrets.token_urlsafe(48),
        "DEBUG": "0",
        "ALLOWED_HOSTS": "ops.example.com",
        "DATABASE_URL": "postgres://opsconsole_app@db.example.com:5432/opsconsole",
    }  # not connected to
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=clean | production | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_has_no_warnings_in_production_mode():
    result = check_deploy(OPSCONSOLE_SECURE="1")

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "System check identified no issues (0 silenced)."
    assert result.stderr == ""


def test_without_the_switch_check_deploy_names_what_is_missing():
    result = check_deploy()

    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):  # HSTS, SSL
        assert warning in result.stderr  # redirect, cookies


def test_a_weaker_hsts_choice_shows_in_check_deploy():
    """HSTS preload is on by default; a site that cannot commit to it turns it off and is told."""
    result = check_deploy(OPSCONSOLE_SECURE="1", SECURE_HSTS_PRELOAD="0")

    assert result.returncode != 0
    assert "security.W021" in result.stderr
