"""Scenarios 3 and 4 of ``make bench``, and the drain half of ``peers``: draining with a real
qcluster, next to the queues underneath and to pgqueuer making the ledger's writes.

One ``manage.py qcluster`` (tests/faults/qcluster.py; 2 workers, the project's queue settings), the
stand-in destination as its own process, and pgqueuer workers (bench/pgqueuer_worker.py, two
processes per batch size), all started once and kept for every round. Operations are created through
``ledger.intake.submit`` and released through ``ledger.people.pause.set_paused``; completion is read from the
operations' states, so internals can change underneath.

Per round (the order rotated each round), ``BENCH_QUEUE_COUNT`` (2,000) of each:

- ``django-q2 no-op``: no-op tasks enqueued in one commit; commit -> queue empty (all acknowledged).
- ``pgqueuer no-op``: no-op jobs enqueued in one statement; -> pgqueuer's queue table empty (every
  job done and logged), two worker processes with batch size 100 (what reproduces the issue's
  figure), and (``peers``) the same with pgqueuer's default batch size 10.
- ``pgqueuer + ledger writes`` (``peers``): ``BENCH_PGQ_LEDGER_COUNT`` (2,000) jobs, each writing in
  its own transaction an effect, an attempt and one audit row chained under an advisory lock
  (bench/pgqueuer_worker.py), two worker processes, batch size 100; -> its queue table empty. After
  the rounds (untimed) every job's three rows are counted and the chain is verified.
- CPU (``peers``, bench/cpu.py): around each drain (resume -> every operation succeeded and the
  queue empty) and each pgqueuer run (enqueue -> queue empty), user + system from
  ``/proc/<pid>/stat`` of the cluster's process group / the pair of pgqueuer workers, and of their
  backends (``application_name`` ``bench-qcluster`` / ``bench-pgq-<kind><batch>``).
- ``drain``: prepare-brief events submitted while a global pause holds them, their nudges left to
  run out; ``set_paused(paused=False)`` -> every one succeeded.
- ``burst``: prepare-brief events submitted one at a time with ``submit.submit_event`` inside one
  transaction (so they become due together, each nudging the cluster as intake does on commit);
  commit -> every one succeeded. The queue rows created from before the burst until its commit
  hooks have run (intake's nudges, and whatever the cluster enqueued meanwhile) are counted.
- ``external``: ``BENCH_EXTERNAL_COUNT`` (50, one claim batch) file-ticket and send-notice
  operations held by a pause, then the stand-in told to answer each create after
  ``BENCH_EXTERNAL_DELAY`` (0.1 s: a ``delay`` fault per create); resume -> all succeeded; against
  the same number of creates made one at a time by this process (``httpx``, one client), each also
  delayed 0.1 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC
from pathlib import Path

from bench.cpu import CpuMeter
from bench.harness import PROJECT_DIR, Rounds, Row, Series, env_int, rate

QUEUE_COUNT = env_int("BENCH_QUEUE_COUNT", 2000)
EXTERNAL_COUNT = env_int("BENCH_EXTERNAL_COUNT", 50)
EXTERNAL_DELAY = float(os.environ.get("BENCH_EXTERNAL_DELAY", "0.1"))
PGQ_BATCH = env_int("BENCH_PGQ_BATCH", 100)
PGQ_DEFAULT_BATCH = 10
PGQ_BATCHES = (PGQ_BATCH, PGQ_DEFAULT_BATCH)
PGQ_LEDGER_COUNT = env_int("BENCH_PGQ_LEDGER_COUNT", 2000)
PGQ_PROCESSES = 2
# How often a timed wait looks (pgqueuer's own wait looks every 5 ms).
POLL = 0.01
CHUNK = 500  # events per submit.submit_batch call when filling a backlog
# The project's queue timings (opsconsole/settings.py), not the short ones of the fault tests.
CLUSTER_ENV = {"Q_TIMEOUT": "90", "Q_RETRY": "120"}
# The cluster's connections are named so that its backends' CPU can be read (bench/cpu.py).
CLUSTER_APPNAME = "bench-qcluster"


def prepare_brief(tag: str, n: int) -> dict:
    return {
        "action": "prepare-brief",
        "delivery_id": f"{tag}-{n}-d1",
        "data": {"request_id": f"{tag}-{n}", "version": 1, "title": f"Brief {n}", "owner": "ops"},
    }


def external_event(tag: str, n: int) -> dict:
    return {
        "action": ("file-ticket", "send-notice")[n % 2],
        "delivery_id": f"{tag}-{n}-d1",
        "data": {"request_id": f"{tag}-{n}", "version": 1, "summary": f"Record {n}", "owner": "ops"},
    }


class Standin:
    """The stand-in destination in its own process (``python -m standin --port 0``)."""

    def __init__(self, log_dir: Path):
        self.log = open(Path(log_dir) / "standin.log", "w+b")  # closed in stop()
        self.process = subprocess.Popen(
            [sys.executable, "-u", "-m", "standin", "--host", "127.0.0.1", "--port", "0"],
            cwd=PROJECT_DIR,
            stdout=subprocess.PIPE,
            stderr=self.log,
            start_new_session=True,
        )
        line = self.process.stdout.readline().decode()
        if "listening on " not in line:
            self.stop()
            raise RuntimeError(f"the stand-in did not start: {line!r}")
        self.url = line.rsplit("listening on ", 1)[1].strip()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self.log.close()


class PgQueuerPeer:
    """pgqueuer's tables in the scratch database, and two worker processes per (kind, batch size).

    Kinds (bench/pgqueuer_worker.py): ``noop`` jobs return at once; ``ledger`` jobs write what the
    ledger writes for one finished operation (an effect, an attempt, one chained audit row) into
    plain tables this class creates. Each pair's connections carry ``application_name``
    ``bench-pgq-<kind><batch>``, so their backends' CPU can be read."""

    def __init__(self, dsn: str, log_dir: Path, kinds: list[tuple[str, int]]):
        self.dsn = dsn
        asyncio.run(self._install(ledger=any(kind == "ledger" for kind, _ in kinds)))
        self.processes: dict[str, list[tuple[subprocess.Popen, object]]] = {}
        self.enqueued: dict[str, int] = {}
        for kind, batch in kinds:
            entrypoint = self.entrypoint(batch, kind)
            env = {
                **os.environ,
                "PGQUEUER_BENCH_DSN": dsn,
                "PGQUEUER_BENCH_APPNAME": self.application_name(batch, kind),
            }
            self.enqueued[entrypoint] = 0
            self.processes[entrypoint] = []
            for number in range(PGQ_PROCESSES):
                log = open(Path(log_dir) / f"pgqueuer-{entrypoint}-{number}.log", "wb")
                process = subprocess.Popen(
                    [sys.executable, str(PROJECT_DIR / "bench" / "pgqueuer_worker.py"), str(batch), entrypoint, kind],
                    cwd=PROJECT_DIR,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                self.processes[entrypoint].append((process, log))

    @staticmethod
    def entrypoint(batch: int, kind: str = "noop") -> str:
        return f"{kind}{batch}"

    @classmethod
    def application_name(cls, batch: int, kind: str = "noop") -> str:
        return f"bench-pgq-{cls.entrypoint(batch, kind)}"

    def process_groups(self, batch: int, kind: str = "noop") -> set[int]:
        """Each worker runs in its own session: its process group is its pid."""
        return {process.pid for process, _ in self.processes[self.entrypoint(batch, kind)]}

    async def _install(self, *, ledger: bool) -> None:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries

        from bench.pgqueuer_worker import LEDGER_TABLES

        connection = await asyncpg.connect(self.dsn)
        try:
            await Queries(AsyncpgDriver(connection)).install()
            if ledger:
                await connection.execute(LEDGER_TABLES)
        finally:
            await connection.close()

    async def _enqueue(self, entrypoint: str, payloads: list[bytes | None]) -> float:
        """Enqueue the jobs in one statement; the ``perf_counter`` at which it returned (committed:
        the workers may start), not after the connection and the event loop are closed."""
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries

        connection = await asyncpg.connect(self.dsn)
        try:
            count = len(payloads)
            await Queries(AsyncpgDriver(connection)).enqueue([entrypoint] * count, payloads, [0] * count)
            return time.perf_counter()
        finally:
            await connection.close()

    def measure(self, observer, batch: int, count: int, *, kind: str = "noop", timeout: float = 300) -> float:
        """Enqueue ``count`` jobs in one statement; time until none is left in the queue table.

        A ledger job's payload is a prepare-brief envelope (its effect row keeps it)."""
        self.check_alive()
        entrypoint = self.entrypoint(batch, kind)
        first = self.enqueued[entrypoint]
        payloads = (
            [json.dumps(prepare_brief(entrypoint, first + n)).encode() for n in range(count)]
            if kind == "ledger"
            else [None] * count
        )
        # The clock starts when the jobs are committed, as the drain's starts before its resume: the
        # workers start on them at once, so a clock started after the connection's close missed
        # part of their work (rounds of 100,000+ jobs/s under load).
        started = asyncio.run(self._enqueue(entrypoint, payloads))
        self.enqueued[entrypoint] += count
        deadline = time.monotonic() + timeout
        while observer.execute("SELECT EXISTS (SELECT 1 FROM pgqueuer)").fetchone()[0]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"pgqueuer jobs did not drain in {timeout:.0f} s")
            time.sleep(0.005)
        return rate(count, time.perf_counter() - started)

    def check_ledger_writes(self, observer, batch: int) -> str:
        """Untimed: every ledger job wrote its three rows, and the audit chain verifies."""
        from bench.pgqueuer_worker import audit_row, chained

        jobs = self.enqueued[self.entrypoint(batch, "ledger")]
        counts = {
            table: observer.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # our own names
            for table in ("bench_peer_effect", "bench_peer_attempt", "bench_peer_audit")
        }
        if set(counts.values()) != {jobs}:
            raise RuntimeError(f"pgqueuer ledger jobs: {jobs} enqueued, rows written {counts}")
        previous = b""
        for number, (job_id, message, created_at, prev_hash, digest) in enumerate(
            observer.execute(
                "SELECT job_id, message, created_at, prev_hash, hash FROM bench_peer_audit ORDER BY id"
            ).fetchall()
        ):
            expected = chained(previous, audit_row(job_id, message, created_at.astimezone(UTC)))
            if bytes(prev_hash) != previous or bytes(digest) != expected:
                raise RuntimeError(f"pgqueuer ledger jobs: the audit chain breaks at row {number + 1}")
            previous = expected
        return f"{jobs} jobs, {jobs} effects, attempts and audit rows; the chain of {jobs} verifies"

    def check_alive(self) -> None:
        for pairs in self.processes.values():
            for process, log in pairs:
                if process.poll() is not None:
                    raise RuntimeError(f"a pgqueuer worker exited with {process.returncode}; see {log.name}")

    def stop(self) -> None:
        everything = [pair for pairs in self.processes.values() for pair in pairs]
        for process, _ in everything:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process, log in everything:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
            log.close()


def scenario_queues(rounds: Rounds, log_dir: Path, wanted: set[str] | frozenset = frozenset({"3", "4"})) -> list[Row]:
    """Scenarios 3, 4 and the drain half of ``peers`` (those of them in ``wanted``), on one cluster and
    one drain series; only the measurements the wanted rows need are made."""
    import httpx
    import psycopg
    from django.db import transaction
    from django_q.models import OrmQ
    from django_q.tasks import async_task

    from ledger.actions import registry
    from ledger.core import accounts
    from ledger.intake import submit
    from ledger.models import Operation
    from ledger.people import pause
    from ledger.states import State
    from tests.faults.qcluster import cluster_pool, database_url, operation_states, wait_for

    dsn = database_url()
    observer = psycopg.connect(dsn, autocommit=True)
    standin = Standin(log_dir)
    pgq = None
    series = {
        name: Series(name, unit)
        for name, unit in (
            ("django-q2 no-op", "tasks/s"),
            (f"pgqueuer no-op, batch {PGQ_BATCH}", "jobs/s"),
            (f"pgqueuer no-op, batch {PGQ_DEFAULT_BATCH}", "jobs/s"),
            ("drain", "operations/s"),
            ("burst", "operations/s"),
            ("burst queue rows", "per event"),
            ("external, one cluster", "operations/s"),
            ("external, one at a time", "calls/s"),
            (f"pgqueuer + ledger writes, batch {PGQ_BATCH}", "jobs/s"),
        )
    }
    # CPU per operation (peers), ms: the cluster's and pgqueuer's workers' processes, and their
    # backends; one value per round, and the backends seen and lost, for the note.
    cpu_subjects = ("drain", "pgqueuer + ledger writes", *(f"pgqueuer no-op, batch {b}" for b in PGQ_BATCHES))
    cpu = {
        (subject, part): Series(f"{subject}, {part}", "ms CPU per operation")
        for subject in cpu_subjects
        for part in ("Python", "PostgreSQL", "both")
    }
    backends_seen: dict[str, list] = {subject: [] for subject in cpu_subjects}
    counter = {"workspace": 0}

    def record_cpu(subject: str, use, operations: int) -> None:
        per = 1000 / operations
        cpu[(subject, "Python")].values.append(use.python * per)
        cpu[(subject, "PostgreSQL")].values.append(use.postgres * per)
        cpu[(subject, "both")].values.append((use.python + use.postgres) * per)
        backends_seen[subject].append((use.backends, use.backends_lost))

    def new_workspace(kind: str):
        counter["workspace"] += 1
        workspace, _ = accounts.create_workspace(
            slug=f"bench-{kind}-{counter['workspace']}", approved_owners=["ops"], actor="bench"
        )
        return workspace

    def queue_empty() -> bool:
        return not OrmQ.objects.exists()

    def queue_rows_created() -> int:
        """Rows ever inserted into the queue table (its identity sequence)."""
        return observer.execute(
            "SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence(%s, 'id')), 0)", [OrmQ._meta.db_table]
        ).fetchone()[0]

    try:
        # Scenario 3 alone measures no pgqueuer peer, and runs without it installed.
        pgq = PgQueuerPeer(dsn, log_dir, pgqueuer_kinds(wanted)) if pgqueuer_kinds(wanted) else None
        with (
            cluster_pool(
                log_dir, env={**CLUSTER_ENV, "OPSCONSOLE_STANDIN_URL": standin.url, "PGAPPNAME": CLUSTER_APPNAME}
            ) as start,
            httpx.Client(base_url=standin.url, timeout=30) as destination,
        ):
            cluster = start("bench")
            clusters = (cluster,)
            cluster_cpu = CpuMeter(observer, groups={cluster.pid}, application_name=CLUSTER_APPNAME)
            unfinished = [State.PENDING, State.PROCESSING, State.RETRYING]

            def succeeded(workspaces, count):
                """Done when none of the workspaces' operations is left to run: one EXISTS on the
                observer's connection, as cheap as pgqueuer's own check (an ORM count of the
                succeeded rows every 20 ms cost the cluster's two cores a few percent, more as the
                count grew); then every one of them must have succeeded."""
                ids = [workspace.pk for workspace in workspaces]

                def done() -> bool:
                    if observer.execute(
                        "SELECT EXISTS (SELECT 1 FROM ledger_operation WHERE state = ANY(%s) "
                        "AND workspace_id = ANY(%s))",
                        [unfinished, ids],
                    ).fetchone()[0]:
                        return False
                    found = Operation.objects.filter(workspace__in=ids, state=State.SUCCEEDED).count()
                    if found != count:
                        raise RuntimeError(f"{found} of {count} operations succeeded: {operation_states()}")
                    return True

                return done

            # Whatever earlier scenarios left pending is drained first (and warms the cluster up):
            # what the workers perform. The claims scenario's operations are its callers' (never the
            # cluster's to run): a claim left unreported ends unknown, one never claimed stays pending.
            callers = [name for name, action in registry.items() if action.performed_by_caller]
            wait_for(
                lambda: (
                    not Operation.objects.filter(state__in=unfinished).exclude(action__in=callers).exists()
                    and queue_empty()
                ),
                timeout=600,
                interval=0.2,
                clusters=clusters,
                describe=lambda: str(operation_states()),
                message="the operations of earlier scenarios did not drain",
            )
            for _ in range(10):
                async_task("bench.drain.noop")
            wait_for(queue_empty, timeout=60, clusters=clusters, message="warm-up tasks did not run")
            for kind, batch in pgqueuer_kinds(wanted):
                pgq.measure(observer, batch, 20, kind=kind, timeout=60)

            def noop():
                with transaction.atomic():
                    for _ in range(QUEUE_COUNT):
                        async_task("bench.drain.noop")
                started = time.perf_counter()
                wait_for(
                    queue_empty, timeout=600, interval=POLL, clusters=clusters, message="no-op tasks did not drain"
                )
                series["django-q2 no-op"].values.append(rate(QUEUE_COUNT, time.perf_counter() - started))

            def pgqueuer(batch):
                name = f"pgqueuer no-op, batch {batch}"

                def measure():
                    meter = CpuMeter(
                        observer,
                        groups=pgq.process_groups(batch),
                        application_name=PgQueuerPeer.application_name(batch),
                    )
                    before = meter.snapshot()
                    series[name].values.append(pgq.measure(observer, batch, QUEUE_COUNT))
                    record_cpu(name, meter.since(before), QUEUE_COUNT)

                return measure

            ledger_cpu = CpuMeter(
                observer,
                groups=pgq.process_groups(PGQ_BATCH, "ledger") if "peers" in wanted else set(),
                application_name=PgQueuerPeer.application_name(PGQ_BATCH, "ledger"),
            )

            def pgqueuer_ledger():
                before = ledger_cpu.snapshot()
                series[f"pgqueuer + ledger writes, batch {PGQ_BATCH}"].values.append(
                    pgq.measure(observer, PGQ_BATCH, PGQ_LEDGER_COUNT, kind="ledger")
                )
                record_cpu("pgqueuer + ledger writes", ledger_cpu.since(before), PGQ_LEDGER_COUNT)

            def hold_backlog(kind: str, make_event, count: int) -> list:
                """``count`` events of a new workspace held by a global pause; their nudges run out."""
                pause.set_paused(paused=True, actor="bench", reason="hold the backlog")
                workspace = new_workspace(kind)
                events = [make_event(workspace.slug, n) for n in range(count)]
                for offset in range(0, count, CHUNK):
                    results = submit.submit_batch(
                        workspace=workspace, raw_events=events[offset : offset + CHUNK], source="cli"
                    )
                    if {result.outcome for result in results} != {"accepted"}:
                        raise RuntimeError(f"intake answered {[r.outcome for r in results][:5]}...")
                wait_for(queue_empty, timeout=600, clusters=clusters, message="paused nudges did not drain")
                return [workspace]

            def drain():
                workspaces = hold_backlog("drain", prepare_brief, QUEUE_COUNT)
                before = cluster_cpu.snapshot()
                started = time.perf_counter()
                pause.set_paused(paused=False, actor="bench")
                wait_for(
                    succeeded(workspaces, QUEUE_COUNT),
                    timeout=600,
                    interval=POLL,
                    clusters=clusters,
                    describe=lambda: str(operation_states()),
                    message="the backlog did not drain",
                )
                series["drain"].values.append(rate(QUEUE_COUNT, time.perf_counter() - started))
                wait_for(queue_empty, timeout=600, clusters=clusters, message="drain nudges did not finish")
                # The CPU of the whole drain: its last follow-up tasks (claims that found nothing) too.
                record_cpu("drain", cluster_cpu.since(before), QUEUE_COUNT)

            def burst():
                workspace = new_workspace("burst")
                events = [prepare_brief(workspace.slug, n) for n in range(QUEUE_COUNT)]
                marks = []
                rows_before = queue_rows_created()
                with transaction.atomic():
                    transaction.on_commit(lambda: marks.append(time.perf_counter()))  # the first hook to run
                    for body in events:
                        if submit.submit_event(workspace=workspace, raw=body, source="cli").outcome != "accepted":
                            raise RuntimeError("a burst event was not accepted")
                rows = queue_rows_created() - rows_before
                wait_for(
                    succeeded([workspace], QUEUE_COUNT),
                    timeout=600,
                    interval=POLL,
                    clusters=clusters,
                    describe=lambda: str(operation_states()),
                    message="the burst did not drain",
                )
                series["burst"].values.append(rate(QUEUE_COUNT, time.perf_counter() - marks[0]))
                series["burst queue rows"].values.append(rows / QUEUE_COUNT)
                wait_for(queue_empty, timeout=600, clusters=clusters, message="burst nudges did not finish")

            def delay_each_create():
                destination.post("/_reset").raise_for_status()
                destination.post(
                    "/_faults", json={"faults": [{"kind": "delay", "seconds": EXTERNAL_DELAY}] * EXTERNAL_COUNT}
                ).raise_for_status()

            def external_cluster():
                workspaces = hold_backlog("external", external_event, EXTERNAL_COUNT)
                delay_each_create()
                started = time.perf_counter()
                pause.set_paused(paused=False, actor="bench")
                wait_for(
                    succeeded(workspaces, EXTERNAL_COUNT),
                    timeout=600,
                    interval=POLL,
                    clusters=clusters,
                    describe=lambda: str(operation_states()),
                    message="the external batch did not drain",
                )
                series["external, one cluster"].values.append(rate(EXTERNAL_COUNT, time.perf_counter() - started))
                check_destination(EXTERNAL_COUNT)
                wait_for(queue_empty, timeout=600, clusters=clusters, message="external nudges did not finish")

            def external_one_at_a_time():
                delay_each_create()
                started = time.perf_counter()
                for n in range(EXTERNAL_COUNT):
                    destination.post(
                        "/records",
                        json={"reference": f"sequential-{n}", "payload": {"n": n}},
                        headers={"Idempotency-Key": f"sequential-{n}"},
                    ).raise_for_status()
                series["external, one at a time"].values.append(rate(EXTERNAL_COUNT, time.perf_counter() - started))
                check_destination(EXTERNAL_COUNT)

            def check_destination(records: int):
                left = destination.get("/_faults").json()["faults"]
                stats = destination.get("/_stats").json()
                if left or stats["records"] != records:
                    raise RuntimeError(
                        f"the stand-in holds {stats['records']} records (expected {records}), "
                        f"{len(left)} delay faults unused"
                    )

            steps = {
                "django-q2 no-op": (noop, {"4"}),
                f"pgqueuer batch {PGQ_BATCH}": (pgqueuer(PGQ_BATCH), {"4", "peers"}),
                f"pgqueuer batch {PGQ_DEFAULT_BATCH}": (pgqueuer(PGQ_DEFAULT_BATCH), {"peers"}),
                f"pgqueuer + ledger writes, batch {PGQ_BATCH}": (pgqueuer_ledger, {"peers"}),
                "drain": (drain, {"3", "4", "peers"}),
                "burst": (burst, {"3"}),
                "external, cluster": (external_cluster, {"4"}),
                "external, one at a time": (external_one_at_a_time, {"4"}),
            }
            loads = rounds.run(
                [(name, step) for name, (step, needed_by) in steps.items() if needed_by & wanted],
                label=f"{'+'.join(sorted(wanted))} queues",
            )
            ledger_check = pgq.check_ledger_writes(observer, PGQ_BATCH) if "peers" in wanted else ""
    finally:
        if pgq is not None:
            pgq.stop()
        standin.stop()
        observer.close()

    burst_rows = series["burst queue rows"]
    rows = [
        Row(
            "3",
            "burst (a nudge per event) vs backlog drain",
            series["burst"],
            ">= 0.9 (as fast)",
            lambda r: r >= 0.9,
            baseline=series["drain"],
        ),
        Row(
            "3",
            "queue rows per burst event",
            burst_rows,
            "-",
            None,
            note="django_q_ormq rows inserted from before the burst until its commit hooks ran, the cluster's "
            "own follow-up tasks in that time included",
        ),
        Row(
            "4",
            "drain vs django-q2 no-op tasks",
            series["drain"],
            ">= 1.5",
            lambda r: r >= 1.5,
            baseline=series["django-q2 no-op"],
        ),
        Row(
            "4",
            f"drain vs pgqueuer no-op (batch {PGQ_BATCH})",
            series["drain"],
            ">= 0.5",
            lambda r: r >= 0.5,
            baseline=series[f"pgqueuer no-op, batch {PGQ_BATCH}"],
        ),
        Row(
            "4",
            f"external batch of {EXTERNAL_COUNT}, {EXTERNAL_DELAY * 1000:.0f} ms per call",
            series["external, one cluster"],
            ">= 10",
            lambda r: r >= 10,
            baseline=series["external, one at a time"],
        ),
    ]
    rows = [row for row in rows if row.scenario in wanted]
    if "peers" in wanted:
        for row in peer_rows(series, cpu, backends_seen, ledger_check):
            row.loads = loads  # each round's load average beside its ratio; an overloaded round left out
            rows.append(row)
    return rows


def pgqueuer_kinds(wanted) -> list[tuple[str, int]]:
    """The pgqueuer workers the wanted rows need: (kind, batch size)."""
    kinds = []
    if wanted & {"4", "peers"}:
        kinds.append(("noop", PGQ_BATCH))
    if "peers" in wanted:
        kinds += [("noop", PGQ_DEFAULT_BATCH), ("ledger", PGQ_BATCH)]
    return kinds


def peer_rows(series: dict, cpu: dict, backends_seen: dict, ledger_check: str) -> list[Row]:
    """The drain's peers: pgqueuer making the ledger's writes, its no-op at its default batch,
    and CPU per operation of each side."""
    ledger = series[f"pgqueuer + ledger writes, batch {PGQ_BATCH}"]

    def backends(subject: str) -> str:
        seen = sorted({count for count, _ in backends_seen[subject]})
        lost = sum(lost for _, lost in backends_seen[subject])
        return f"{subject}: {'/'.join(map(str, seen))} backends, {lost} ended during a measurement"

    cpu_note = (
        "user + system from /proc/<pid>/stat, before and after each measurement; Python: the qcluster's "
        f"process group / the {PGQ_PROCESSES} pgqueuer ledger workers; PostgreSQL: their backends "
        f"(by application_name); {backends('drain')}; {backends('pgqueuer + ledger writes')}"
    )
    rows = [
        Row(
            "peers",
            f"drain vs pgqueuer making the ledger's writes (batch {PGQ_BATCH})",
            series["drain"],
            ">= 3",
            lambda r: r >= 3,
            baseline=ledger,
            note=f"per job: an effect, an attempt and a chained audit row under an advisory lock, its own "
            f"transaction; {ledger_check}",
        ),
        Row(
            "peers",
            f"drain vs pgqueuer no-op (batch {PGQ_DEFAULT_BATCH}, its default)",
            series["drain"],
            ">= 1.3 every round",
            lambda r: r >= 1.3,
            baseline=series[f"pgqueuer no-op, batch {PGQ_DEFAULT_BATCH}"],
            every_round=True,
        ),
        Row(
            "peers",
            f"pgqueuer making the ledger's writes vs its no-op (batch {PGQ_BATCH})",
            ledger,
            "(shown)",
            None,
            baseline=series[f"pgqueuer no-op, batch {PGQ_BATCH}"],
        ),
    ]

    def noop_cpu(part: str) -> str:
        # What pgqueuer's own machinery costs a job (dequeue, the log of finished jobs), for reading
        # the ledger-writes peer's figure.
        return "pgqueuer no-op per job, the same parts: " + ", ".join(
            f"batch {batch} {cpu[(f'pgqueuer no-op, batch {batch}', part)].median:.3g} ms" for batch in PGQ_BATCHES
        )

    for part in ("Python", "PostgreSQL", "both"):
        rows.append(
            Row(
                "peers",
                f"drain CPU per operation, {part}: ours vs pgqueuer making the ledger's writes",
                cpu[("drain", part)],
                "(shown)",
                None,
                baseline=cpu[("pgqueuer + ledger writes", part)],
                note=(f"{cpu_note}; " if part == "Python" else "") + noop_cpu(part),
            )
        )
    return rows
