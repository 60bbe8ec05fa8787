"""Start and stop real ``manage.py qcluster`` processes against the database this process uses.

The cluster runs in its own session (``start_new_session=True``), so it forms its own process
group: ``kill()`` sends SIGKILL to that whole group, as a power cut would; ``stop()`` sends SIGTERM
to the main pid only, because SIGTERM to the whole group can hang ``qcluster`` (django-q2 #346),
and falls back to ``kill()`` when the cluster does not stop in time. Waits poll the database with a
bounded timeout and fail with the cluster's log, never a fixed sleep.

Not pytest-specific (``bench/drain.py`` uses it too): failures raise ``ClusterError``, an
``AssertionError``, so pytest reports their message.
"""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.db import connection

PROJECT_DIR = Path(__file__).resolve().parents[2]

# Short, consistent django-q2 timings for tests: retry above timeout and lease (ledger.checks).
DEFAULT_ENV = {
    "Q_WORKERS": "2",
    "Q_TIMEOUT": "30",
    "Q_RETRY": "90",
    "OPSCONSOLE_LEASE_SECONDS": "60",
    "LEDGER_LOG_LEVEL": "WARNING",
}
# Never inherited from the calling process: a cluster crashes only when its caller asks, and
# DEBUG would make every worker keep a log of its queries.
_NOT_INHERITED = ("OPSCONSOLE_CRASH_AT", "OPSCONSOLE_CRASH_ONCE_FILE", "DEBUG", "Q_CLUSTER_NAME")


class ClusterError(AssertionError):
    pass


def database_url(settings_dict: dict | None = None) -> str:
    """A DATABASE_URL for the database this process is connected to (the test database in tests)."""
    s = settings_dict or connection.settings_dict
    if s["ENGINE"] not in ("django.db.backends.postgresql", "opsconsole.postgresql"):
        raise ClusterError(f"no DATABASE_URL for engine {s['ENGINE']}")
    auth = quote(s.get("USER") or "", safe="")
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"], safe="")
    host = s.get("HOST") or "127.0.0.1"
    port = f":{s['PORT']}" if s.get("PORT") else ""
    return f"postgres://{auth}@{host}{port}/{quote(s['NAME'], safe='')}"


def wait_for(
    condition: Callable[[], object],
    *,
    timeout: float,
    message: str,
    clusters: tuple["QCluster", ...] = (),
    describe: Callable[[], str] | None = None,
    interval: float = 0.1,
):
    """Poll ``condition`` until it returns something truthy (and return it), for at most ``timeout``
    seconds. Fails early when one of ``clusters`` exits; on failure shows ``describe()`` (what
    was found instead) and the clusters' logs."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        exited = [cluster for cluster in clusters if cluster.exited()]
        if exited or time.monotonic() > deadline:
            why = (
                f"cluster {exited[0].name} exited with {exited[0].process.returncode}"
                if exited
                else f"gave up after {timeout:.0f}s"
            )
            found = f"\nfound: {describe()}" if describe else ""
            logs = "".join(f"\n{cluster.log_tail()}" for cluster in clusters)
            raise ClusterError(f"{message} ({why}){found}{logs}")
        time.sleep(interval)


class QCluster:
    """One ``manage.py qcluster`` process (its own process group) and its log file."""

    def __init__(self, *, name: str, log_dir: Path, env: dict[str, str] | None = None, db_url: str | None = None):
        self.name = name
        self.log_path = Path(log_dir) / f"qcluster-{name}.log"
        self.env = {key: value for key, value in os.environ.items() if key not in _NOT_INHERITED}
        self.env.update(DEFAULT_ENV)
        self.env.update(
            {
                "DATABASE_URL": db_url or database_url(),
                # django-q2 signs each task with SECRET_KEY: the cluster must share the caller's.
                "SECRET_KEY": settings.SECRET_KEY,
                # Keys with a sensitive identity field are hashed under it: the same event, the same key.
                "OPSCONSOLE_KEY_SECRET": settings.OPSCONSOLE_KEY_SECRET,
                # The audit chain is hashed under it: the tests verify the chains the cluster writes.
                "OPSCONSOLE_AUDIT_KEY": settings.OPSCONSOLE_AUDIT_KEY,
                "OPSCONSOLE_AUDIT_KEY_ID": settings.OPSCONSOLE_AUDIT_KEY_ID,
                # The stand-in and the test servers listen on 127.0.0.1 (ledger.actions.egress).
                "OPSCONSOLE_EGRESS_ALLOW_PRIVATE": "1" if settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE else "0",
                "DJANGO_SETTINGS_MODULE": "opsconsole.settings",
                "PYTHONUNBUFFERED": "1",
            }
        )
        self.env.update(env or {})
        self.process: subprocess.Popen | None = None

    def start(self, *, wait: bool = True, timeout: float = 30) -> "QCluster":
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", "qcluster"],
                cwd=PROJECT_DIR,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if wait:
            self.wait_running(timeout=timeout)
        return self

    def wait_running(self, *, timeout: float = 30) -> None:
        """Wait until the sentinel reports the cluster running (workers and pusher spawned)."""
        wait_for(
            lambda: " running." in self.log_text(),
            timeout=timeout,
            clusters=(self,),
            message=f"cluster {self.name} did not start",
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def exited(self) -> bool:
        return self.process is not None and self.process.poll() is not None

    def pids(self) -> set[int]:
        """Every live process of the cluster: the members of its process group."""
        if self.process is None:
            return set()
        found = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # pid (comm) state ppid pgrp ...: comm may hold spaces, so split after its ")".
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[2]) == self.pid and fields[0] != "Z":
                found.add(int(entry.name))
        return found

    def kill(self) -> None:
        """SIGKILL the whole process group (main, sentinel, pusher, monitor, workers) and reap it."""
        if self.process is None:
            return
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=10)
        # Orphaned children are reparented; wait until none of the group is left running.
        wait_for(lambda: not self.pids(), timeout=10, message=f"cluster {self.name} outlived SIGKILL")

    def stop(self, *, timeout: float = 30) -> None:
        """Stop gracefully (SIGTERM to the main pid only); SIGKILL the group if it does not stop."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` of a process's log, headed by its path (for a failing test's message)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        text = ""
    tail = "\n".join(text.splitlines()[-lines:])
    return f"--- {path} (last {lines} lines) ---\n{tail}"


def stop_session(process: subprocess.Popen, *, timeout: float) -> None:
    """Stop a process started in its own session: SIGTERM, then SIGKILL of its whole group if it
    does not end within ``timeout``, so nothing it started outlives the test; reaped."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=10)


@contextmanager
def cluster_pool(log_dir: Path, **defaults):
    """Yield ``start(name, **options)``, which starts a ``QCluster``; every cluster started is
    stopped on exit, whatever happened, so no process outlives the caller."""
    started: list[QCluster] = []

    def start(name: str, *, wait: bool = True, **options) -> QCluster:
        cluster = QCluster(name=name, log_dir=log_dir, **(defaults | options))
        started.append(cluster)
        return cluster.start(wait=wait)

    try:
        yield start
    finally:
        errors = []
        for cluster in started:
            try:
                cluster.stop()
            except Exception as exc:  # noqa: BLE001  stop the others first, then report
                errors.append(exc)
        if errors:
            raise errors[0]


def wait_for_other_sessions_to_end(*, timeout: float = 10) -> None:
    """Wait until no other session is connected to this database (PostgreSQL): after a SIGKILL,
    the server has then rolled back whatever the dead processes left open, so reads are final."""

    def others() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND backend_type = 'client backend' "
                "AND pid <> pg_backend_pid()"
            )
            return cursor.fetchone()[0]

    wait_for(lambda: others() == 0, timeout=timeout, message="killed cluster sessions are still open")


# --- the workload and what must hold after it ---------------------------------------------------


def submit_prepare_briefs(workspace, count: int, *, prefix: str = "R") -> list[int]:
    """Submit ``count`` distinct prepare-brief events through intake (each nudges the workers on
    commit); returns the new operations' ids."""
    from ledger.intake import submit

    events = [
        {
            "action": "prepare-brief",
            "delivery_id": f"{prefix}-{n}-d1",
            "data": {"request_id": f"{prefix}-{n}", "version": 1, "title": f"Brief {n}", "owner": "ops"},
        }
        for n in range(count)
    ]
    results = submit.submit_batch(workspace=workspace, raw_events=events, source="cli")
    outcomes = {result.outcome for result in results}
    if outcomes != {"accepted"}:
        raise ClusterError(f"intake did not accept every event: {outcomes}")
    return [result.operation.pk for result in results]


def operation_states(operation_ids: list[int] | None = None) -> dict[str, int]:
    """How many operations are in each state (all of them, or those of ``operation_ids``)."""
    from django.db.models import Count

    from ledger.models import Operation

    operations = Operation.objects.all() if operation_ids is None else Operation.objects.filter(pk__in=operation_ids)
    return dict(operations.order_by().values_list("state").annotate(n=Count("id")))


def assert_each_performed_exactly_once(operation_ids: list[int]) -> None:
    """Every operation succeeded, has exactly one draft and exactly one ok Attempt; none is missing."""
    from django.db.models import Count

    from ledger.models import Attempt, ReviewDraft

    states = operation_states(operation_ids)
    assert states == {"succeeded": len(operation_ids)}, f"states of the operations: {states}"
    drafts = list(ReviewDraft.objects.values_list("operation_id", flat=True))
    assert sorted(drafts) == sorted(operation_ids), f"{len(drafts)} drafts for {len(operation_ids)} operations"
    ok_per_operation = dict(
        Attempt.objects.filter(outcome=Attempt.Outcome.OK).order_by().values_list("operation").annotate(n=Count("id"))
    )
    performed_twice = {pk: n for pk, n in ok_per_operation.items() if n != 1}
    assert not performed_twice, f"operations performed more than once: {performed_twice}"
    assert sorted(ok_per_operation) == sorted(operation_ids), (
        f"{len(ok_per_operation)} operations with an ok attempt, of {len(operation_ids)}"
    )
