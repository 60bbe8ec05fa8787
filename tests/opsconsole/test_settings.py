"""Settings come from the environment and refuse unsafe defaults."""

import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
POSTGRES = "postgres://postgres@127.0.0.1:5432/elsewhere"


def load_settings(*argv, show="s.DATABASES['default']['ENGINE']", **env):
    """Import the settings module in a fresh interpreter, as the command ``argv`` would (manage.py
    ...), with exactly these variables (a PostgreSQL DATABASE_URL unless given); its stdout is
    ``show`` evaluated there."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {
            "SECRET_KEY",
            "OPSCONSOLE_KEY_SECRET",
            "DEBUG",
            "DATABASE_URL",
            "CONN_MAX_AGE",
            "DATABASE_POOL_MODE",
            "DATABASE_REPLICA_URL",
            "OPSCONSOLE_REPLICA_LAG_WARNING_SECONDS",
            "OPSCONSOLE_EGRESS_ALLOW_PRIVATE",
        }
        and not k.startswith("OPSCONSOLE_AUDIT_")
    }
    code = f"import sys; sys.argv = {['manage.py', *argv]!r}; import opsconsole.settings as s; print({show})"
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=clean | {"OPSCONSOLE_KEY_SECRET": "ks", "OPSCONSOLE_AUDIT_KEY": "ak", "DATABASE_URL": POSTGRES} | env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_it_refuses_to_start_without_a_secret_key_when_debug_is_off():
    result = load_settings(DEBUG="0")
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off." in result.stderr


def test_it_uses_a_development_key_only_with_debug_on():
    result = load_settings(DEBUG="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "opsconsole.postgresql"


def test_it_refuses_to_start_without_a_key_secret_when_debug_is_off():
    """Keys of sensitive identity fields are hashed under it: a production process must be given one."""
    result = load_settings(SECRET_KEY="k", OPSCONSOLE_KEY_SECRET="")
    assert result.returncode != 0
    assert "OPSCONSOLE_KEY_SECRET must be set when DEBUG is off." in result.stderr


def test_it_uses_a_development_key_secret_only_with_debug_on():
    result = load_settings(DEBUG="1", OPSCONSOLE_KEY_SECRET="", show="s.OPSCONSOLE_KEY_SECRET")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "dev-only-key-secret-do-not-use-in-production"


def test_it_reads_the_key_secret_from_the_environment():
    result = load_settings(SECRET_KEY="k", OPSCONSOLE_KEY_SECRET="from-env", show="s.OPSCONSOLE_KEY_SECRET")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "from-env"


def test_it_refuses_to_start_without_an_audit_key_when_debug_is_off():
    """The audit chain is hashed under it: a production process must be given one."""
    result = load_settings(SECRET_KEY="k", OPSCONSOLE_AUDIT_KEY="")
    assert result.returncode != 0
    assert "OPSCONSOLE_AUDIT_KEY must be set when DEBUG is off." in result.stderr


def test_it_uses_a_development_audit_key_only_with_debug_on_under_its_own_id():
    result = load_settings(
        DEBUG="1", OPSCONSOLE_AUDIT_KEY="", show="(s.OPSCONSOLE_AUDIT_KEY, s.OPSCONSOLE_AUDIT_KEY_ID)"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "('dev-only-audit-key-do-not-use-in-production', 'dev')"


def test_it_reads_the_audit_keys_from_the_environment():
    result = load_settings(
        SECRET_KEY="k",
        OPSCONSOLE_AUDIT_KEY="k3",
        OPSCONSOLE_AUDIT_KEY_ID="3",
        OPSCONSOLE_AUDIT_OLD_KEYS="1=k=1,2=k2",
        show="(s.OPSCONSOLE_AUDIT_KEY_ID, s.OPSCONSOLE_AUDIT_OLD_KEYS)",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "('3', {'1': 'k=1', '2': 'k2'})"


def test_it_refuses_another_secret_under_the_current_audit_key_id():
    result = load_settings(
        SECRET_KEY="k", OPSCONSOLE_AUDIT_KEY="new", OPSCONSOLE_AUDIT_KEY_ID="1", OPSCONSOLE_AUDIT_OLD_KEYS="1=old"
    )
    assert result.returncode != 0
    assert "a new key needs a new id" in result.stderr


def test_it_reads_the_database_from_database_url():
    result = load_settings(
        SECRET_KEY="k",
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/elsewhere",
        show="s.DATABASES['default']['NAME'], s.DATABASES['default']['ENGINE']",
    )
    assert result.returncode == 0, result.stderr
    # Django's backend, its health check asking the socket (opsconsole/postgresql/base.py).
    assert result.stdout.strip() == "elsewhere opsconsole.postgresql"


def test_without_database_url_it_says_how_to_get_one():
    """No default database: the message names the embedded server and the make targets that start it."""
    for debug in ("0", "1"):
        result = load_settings(SECRET_KEY="k", DEBUG=debug, DATABASE_URL="")
        assert result.returncode != 0
        assert "DATABASE_URL is not set" in result.stderr
        assert "`make demo` and `make test` start the embedded PostgreSQL" in result.stderr
        assert "python -m opsconsole.embedded_db start" in result.stderr


def test_it_runs_on_postgresql_only():
    for url in ("sqlite:///db.sqlite3", "mysql://u@127.0.0.1/x"):
        result = load_settings(SECRET_KEY="k", DATABASE_URL=url)
        assert result.returncode != 0
        assert "DATABASE_URL must name a PostgreSQL database" in result.stderr, result.stderr


def test_it_puts_the_queue_on_the_default_database():
    assert settings.Q_CLUSTER.get("orm") == "default"
    assert settings.Q_CLUSTER["save_limit"] == -1


CONNECTIONS = "(s.DATABASES['default']['CONN_MAX_AGE'], s.DATABASES['default'].get('OPTIONS', {}).get('pool'))"


def test_the_qcluster_and_gunicorn_keep_their_connection():
    """Both are a fixed number of single-threaded processes: one connection each, kept."""
    for argv in (["qcluster"], []):  # gunicorn imports the settings with its own argv
        result = load_settings(*argv, show=CONNECTIONS, SECRET_KEY="k", DATABASE_URL=POSTGRES)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "(600, None)"


SESSION_STATE = (
    "(s.DATABASES['default'].get('OPTIONS', {}).get('prepare_threshold'),"
    " s.DATABASES['default'].get('DISABLE_SERVER_SIDE_CURSORS', False))"
)


def test_a_direct_connection_prepares_the_prepared_cursors_statements_and_streams_with_cursors():
    result = load_settings(show=SESSION_STATE, SECRET_KEY="k")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"({2**31 - 1}, False)"


def test_behind_a_transaction_pooler_nothing_outlives_a_transaction_on_the_server():
    """No prepared statement (psycopg prepares nothing when the threshold is None) and no cursor
    WITH HOLD: the next transaction may run on another server session (docs/operations.md)."""
    result = load_settings(show=SESSION_STATE, SECRET_KEY="k", DATABASE_POOL_MODE="transaction")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(None, True)"


def test_it_refuses_a_pool_mode_it_cannot_run_under():
    result = load_settings(SECRET_KEY="k", DATABASE_POOL_MODE="statement")

    assert result.returncode != 0
    assert "DATABASE_POOL_MODE must be session or transaction, not 'statement'" in result.stderr


def test_runserver_shares_a_small_pool_between_its_threads_on_postgresql():
    """runserver starts a thread per client connection: kept connections would grow without bound."""
    result = load_settings("runserver", show=CONNECTIONS, SECRET_KEY="k", DATABASE_URL=POSTGRES, CONN_MAX_AGE="600")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(0, {'min_size': 1, 'max_size': 4})"


def test_the_egress_policy_refuses_private_destinations_unless_debug_or_the_setting_allows_them():
    """Production (DEBUG off) calls no destination on loopback or in a private range unless told to
    (ledger.actions.egress); the demo (DEBUG on) calls the stand-in on 127.0.0.1."""
    show = "s.OPSCONSOLE_EGRESS_ALLOW_PRIVATE"
    production = load_settings(SECRET_KEY="k", DEBUG="0", show=show)
    allowed = load_settings(SECRET_KEY="k", DEBUG="0", OPSCONSOLE_EGRESS_ALLOW_PRIVATE="1", show=show)
    demo = load_settings(DEBUG="1", show=show)
    assert [r.stdout.strip() for r in (production, allowed, demo)] == ["False", "True", "True"], production.stderr


def test_manage_py_says_what_the_settings_refuse_in_one_line():
    """A command run without the settings it needs (a person's terminal, docs/integrations.md's
    `integrations apply` without DATABASE_URL) prints the refusal as one line, not a traceback."""
    clean = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG", "DATABASE_URL"}}
    clean = {k: v for k, v in clean.items() if not k.startswith(("OPSCONSOLE_", "DJANGO_"))}
    for env, said in [
        ({}, "manage.py: SECRET_KEY must be set when DEBUG is off."),
        ({"DEBUG": "1"}, "manage.py: DATABASE_URL is not set: "),
    ]:
        result = subprocess.run(
            [sys.executable, "manage.py", "integrations", "apply", "examples/integrations.yaml", "--dry-run"],
            cwd=ROOT,
            env=clean | env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 1
        assert result.stderr.startswith(said), result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "Traceback" not in result.stderr
    assert "python -m opsconsole.embedded_db url" in result.stderr  # how to reach the running demo's
