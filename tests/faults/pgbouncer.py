"""Start and stop a real PgBouncer in transaction mode in front of the database this process uses,
the way ``tests/faults/gunicorn.py`` does for gunicorn.

Its configuration is written to a folder of its own: the server it points at (the test database's,
as ``database_url`` names it), ``auth_type = any`` with that server's user (the suite's server
trusts local connections), a pool smaller than its clients so that their transactions move between
server connections as a busy deployment's do. PgBouncer refuses to run as root: as root it runs as
the embedded PostgreSQL's unprivileged user (``opsconsole.embedded_db.system_user``).
"""

import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from opsconsole import embedded_db
from tests.faults.gunicorn import free_port
from tests.faults.qcluster import database_url, log_tail, stop_session, wait_for

# Debian's package installs it outside a non-root PATH.
BINARY = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")


class PgBouncer:
    def __init__(self, *, log_dir: Path, pool_size: int = 3):
        self.port = free_port()
        self.log_path = Path(log_dir) / "pgbouncer.log"
        server = urlsplit(database_url())
        # The same database, user and password, through the pooler's port.
        self.url = urlunsplit(server._replace(netloc=f"{server.netloc.rpartition('@')[0]}@127.0.0.1:{self.port}"))
        self.config = {
            "listen_addr": "127.0.0.1",
            "listen_port": self.port,
            "unix_socket_dir": "",
            "auth_type": "any",
            "pool_mode": "transaction",
            "default_pool_size": pool_size,
            "max_client_conn": 200,
            "logfile": "",
            "pidfile": "",
            "ignore_startup_parameters": "extra_float_digits",
        }
        self.server = f"host={server.hostname} port={server.port or 5432} user={server.username}" + (
            f" password={server.password}" if server.password else ""
        )
        self.folder: str | None = None
        self.process: subprocess.Popen | None = None

    def start(self, *, timeout: float = 15) -> "PgBouncer":
        # Readable by the unprivileged user it may run as (pytest's tmp folders are root's alone).
        self.folder = tempfile.mkdtemp(prefix="pgbouncer-")
        os.chmod(self.folder, 0o755)
        ini = Path(self.folder) / "pgbouncer.ini"
        settings = "\n".join(f"{name} = {value}" for name, value in self.config.items())
        ini.write_text(f"[databases]\n* = {self.server}\n\n[pgbouncer]\n{settings}\n")
        ini.chmod(0o644)
        as_user = ["-u", embedded_db.system_user().pw_name] if os.geteuid() == 0 else []
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [BINARY, *as_user, str(ini)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(
            self.answers, timeout=timeout, describe=self.log_tail, message=f"PgBouncer did not answer on {self.port}"
        )
        return self

    def answers(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"PgBouncer exited with {self.process.returncode}\n{self.log_tail()}")
        try:
            with psycopg.connect(self.url, connect_timeout=2, prepare_threshold=None) as connection:
                return connection.execute("SELECT 1").fetchone() == (1,)
        except psycopg.OperationalError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            stop_session(self.process, timeout=10)
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)


@contextmanager
def running_pgbouncer(log_dir: Path, **options):
    pooler = PgBouncer(log_dir=log_dir, **options)
    try:
        yield pooler.start()
    finally:
        pooler.stop()
