"""Benchmark: how fast one qcluster drains the ledger, next to the django-q2 queue it rides on.

    DEBUG=1 .venv/bin/python bench/drain.py     # make bench ran this once; now bench/run.py

On the same cluster, in one run:
1. ``noop``: 2,000 no-op django-q2 tasks, enqueued in one commit; timed until the queue is empty
   (every task acknowledged).
2. ``drain``: 2,000 pending prepare-brief operations, held by a global pause while they were
   submitted (their nudges found nothing to claim); timed from the resume, which enqueues one
   nudge per claim batch of the backlog (at most one per worker), until every operation has succeeded.
3. ``burst``: 2,000 prepare-brief events submitted in one commit while the cluster runs, each with
   its own nudge, as intake sends them; timed from the commit until every operation has succeeded.

On the PostgreSQL server DATABASE_URL names (it measured on SQLite too, before the project ran on
PostgreSQL only). It never touches that database: it creates a scratch database next to it
(``bench_<name>``), migrates it, and drops it at the end. See bench/README.md for figures.
"""

import logging
import os
import sys
import tempfile
import time
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
COUNT = int(os.environ.get("BENCH_COUNT", "2000"))
# The cluster runs on the project's production defaults (opsconsole/settings.py), so the figures
# describe a deployed cluster; these variables, when set, override them for an experiment.
CLUSTER_ENV = {name: os.environ[name] for name in ("Q_WORKERS", "OPSCONSOLE_CLAIM_BATCH") if name in os.environ}


def noop():
    """The no-op task (the workers import it as ``bench.drain.noop``)."""


def main() -> None:
    sys.path.insert(0, str(PROJECT_DIR))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opsconsole.settings")
    os.environ.update(CLUSTER_ENV)
    run_on_scratch_database(run)


def run_on_scratch_database(run, *, prefix: str = "bench") -> None:
    """Call ``run(scratch_dir, label)`` with DATABASE_URL pointing at a fresh database, dropped after."""
    with tempfile.TemporaryDirectory(prefix="opsconsole-bench-") as scratch_dir:
        scratch = ScratchDatabase(os.environ.get("DATABASE_URL", ""), Path(scratch_dir), prefix=prefix)
        os.environ["DATABASE_URL"] = scratch.url
        try:
            run(Path(scratch_dir), scratch.label)
        finally:
            scratch.drop()


class ScratchDatabase:
    """A fresh database for one run: ``<prefix>_<name>`` beside a PostgreSQL DATABASE_URL.

    Each benchmark has its own prefix, so one never drops the database of another running beside it."""

    def __init__(self, url: str, scratch_dir: Path, prefix: str = "bench"):
        import environ

        self.postgres = None
        if url and environ.Env.db_url_config(url)["ENGINE"] == "django.db.backends.postgresql":
            config = environ.Env.db_url_config(url)
            self.postgres = {
                "host": config.get("HOST") or "127.0.0.1",
                "port": config.get("PORT") or 5432,
                "user": config.get("USER") or None,
                "password": config.get("PASSWORD") or None,
            }
            self.name = f"{prefix}_{config['NAME']}"
            self._admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)', f'CREATE DATABASE "{self.name}"')
            self.url = url.rsplit("/", 1)[0].split("?")[0] + f"/{self.name}"
            self.label = f"PostgreSQL ({self.name})"
        else:
            sys.exit(
                "The benchmarks run on PostgreSQL: set DATABASE_URL=postgres://user@host:port/name (a scratch "
                "database is made beside it), e.g. the embedded server's: "
                "$(.venv/bin/python -m opsconsole.embedded_db start)"
            )

    def _admin(self, *statements: str) -> None:
        import psycopg

        with psycopg.connect(
            dbname="postgres", autocommit=True, **{k: v for k, v in self.postgres.items() if v is not None}
        ) as admin:
            for statement in statements:
                admin.execute(statement)

    def drop(self) -> None:
        if self.postgres:
            from django.db import connections

            connections.close_all()
            self._admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def run(log_dir: Path, database_label: str) -> None:
    import django

    django.setup()
    logging.getLogger("django-q").setLevel(logging.WARNING)  # not a line per enqueued task
    from django.conf import settings
    from django.core.management import call_command
    from django.db import transaction
    from django_q.models import OrmQ
    from django_q.tasks import async_task

    from ledger.core import accounts
    from ledger.models import Operation
    from ledger.people import pause
    from ledger.states import State
    from tests.faults.qcluster import cluster_pool, submit_prepare_briefs, wait_for

    call_command("migrate", verbosity=0)
    workspace, _ = accounts.create_workspace(slug="bench", approved_owners=["ops"], actor="bench")
    workers = settings.Q_CLUSTER["workers"]
    print(
        f"database: {database_label}; one qcluster, {workers} workers, claim batch "
        f"{settings.OPSCONSOLE_CLAIM_BATCH}; {COUNT} of each"
    )

    def queue_empty():
        return not OrmQ.objects.exists()

    def succeeded(count):
        return lambda: Operation.objects.filter(state=State.SUCCEEDED).count() >= count

    with cluster_pool(log_dir, env=CLUSTER_ENV) as start:
        cluster = start("bench")
        for _ in range(10):  # warm-up: workers connected, code imported
            async_task("bench.drain.noop")
        wait_for(queue_empty, timeout=60, clusters=(cluster,), message="warm-up tasks did not run")

        with transaction.atomic():
            for _ in range(COUNT):
                async_task("bench.drain.noop")
        started = time.perf_counter()
        wait_for(queue_empty, timeout=600, interval=0.02, clusters=(cluster,), message="no-op tasks did not drain")
        noop_rate = COUNT / (time.perf_counter() - started)

        pause.set_paused(paused=True, actor="bench", reason="hold the backlog")
        submit_prepare_briefs(workspace, COUNT, prefix="drain")
        wait_for(queue_empty, timeout=600, clusters=(cluster,), message="paused nudges did not drain")
        started = time.perf_counter()
        pause.set_paused(paused=False, actor="bench")
        nudges = OrmQ.objects.count()
        wait_for(succeeded(COUNT), timeout=600, interval=0.02, clusters=(cluster,), message="the backlog did not drain")
        drain_rate = COUNT / (time.perf_counter() - started)
        wait_for(queue_empty, timeout=600, clusters=(cluster,), message="drain nudges did not finish")

        marks = []
        with transaction.atomic():
            transaction.on_commit(lambda: marks.append(time.perf_counter()))  # runs first after commit
            submit_prepare_briefs(workspace, COUNT, prefix="burst")
        wait_for(
            succeeded(2 * COUNT), timeout=600, interval=0.02, clusters=(cluster,), message="the burst did not drain"
        )
        burst_rate = COUNT / (time.perf_counter() - marks[0])

    print(f"no-op django-q2 tasks:            {noop_rate:8.0f} tasks/s")
    print(
        f"ledger, drain a pending backlog:  {drain_rate:8.0f} operations/s "
        f"(ratio {drain_rate / noop_rate:.2f}; the resume enqueued {nudges} nudges)"
    )
    print(f"ledger, burst with one nudge each:{burst_rate:8.0f} operations/s (ratio {burst_rate / noop_rate:.2f})")


if __name__ == "__main__":
    main()
