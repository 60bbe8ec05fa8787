"""The pgqueuer peer of scenarios 4 and ``peers``: a worker process with one entrypoint.

bench/scenario_queue.py starts two of these per (kind, batch size), each its own process:

    PGQUEUER_BENCH_DSN=postgres://... python bench/pgqueuer_worker.py [BATCH_SIZE [ENTRYPOINT [KIND]]]

Two kinds of job:

- ``noop`` (scenario 4): returns at once. A job is then a row taken and deleted.
- ``ledger`` (``peers``): per job, what the ledger writes when it finishes one operation,
  in one transaction of its own: an effect row (the job's payload), an attempt row, and one
  audit row appended to a single hash chain: ``pg_advisory_xact_lock`` on the chain, read its head,
  ``sha256(previous hash || the row)``, insert. The tables are plain ones the bench creates
  (``LEDGER_TABLES`` below: primary keys only). Jobs of a batch run concurrently (pgqueuer starts a
  task per job); each takes a connection from this process's asyncpg pool
  (``PGQUEUER_BENCH_POOL``, 2), so a process writes up to that many jobs at once, which the chain's
  lock serialises from the lock to the commit. Measured here (two processes, 1,500 jobs, 4 runs
  each): batch 100 moved ~700-800 jobs/s, batch 10 ~450-580; pools of 1, 2 and 4 the same, 8 slower
  (more writers queueing on the one lock).

It runs the way ``pgq run bench.pgqueuer_worker:create`` would (``pgqueuer.run``: the same
supervisor, SIGTERM/SIGINT handling and uvloop; batch size 10, pgqueuer's default), without the
command line itself, whose ``--log-level`` default fails in pgqueuer 1.6.0 (``'str' object has no
attribute 'name'``). Every connection it opens carries ``application_name``
``PGQUEUER_BENCH_APPNAME``, so the bench can read its backends' CPU. Standard library, asyncpg and
pgqueuer only: it never imports Django. asyncpg and pgqueuer (bench-only, requirements-bench.txt) are
imported where they are used, so that the harness (``LEDGER_TABLES``, ``audit_row``, ``chained``) and
tests/test_bench_scripts.py import this module without them.
"""

import hashlib
import json
import os
import sys
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncpg

ENTRYPOINT = "noop"  # the job name this worker takes: one per (kind, batch size), so each pair has its own jobs
KIND = "noop"
# The chain's advisory lock key ("BPAU", bench peer audit); one chain, as one workspace's in the ledger.
CHAIN_LOCK = 0x42504155

LEDGER_TABLES = """
CREATE TABLE IF NOT EXISTS bench_peer_effect (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id bigint NOT NULL,
    payload jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS bench_peer_attempt (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id bigint NOT NULL,
    effect_id bigint NOT NULL,
    outcome text NOT NULL,
    started_at timestamptz NOT NULL,
    finished_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS bench_peer_audit (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id bigint NOT NULL,
    message text NOT NULL,
    created_at timestamptz NOT NULL,
    prev_hash bytea NOT NULL,
    hash bytea NOT NULL
);
"""


def audit_row(job_id: int, message: str, created_at: datetime) -> bytes:
    """What an audit row's hash covers (the verifier in bench/scenario_queue.py rebuilds it)."""
    return json.dumps([job_id, message, created_at.isoformat()], separators=(",", ":")).encode()


def chained(prev_hash: bytes, row: bytes) -> bytes:
    return hashlib.sha256(prev_hash + row).digest()


def ledger_job(pool: "asyncpg.Pool"):
    from pgqueuer.models import Job

    async def write(job: Job) -> None:
        started = datetime.now(UTC)
        async with pool.acquire() as connection, connection.transaction():
            effect_id = await connection.fetchval(
                "INSERT INTO bench_peer_effect (job_id, payload) VALUES ($1, $2::text::jsonb) RETURNING id",
                job.id,
                job.payload.decode(),
            )
            await connection.execute(
                "INSERT INTO bench_peer_attempt (job_id, effect_id, outcome, started_at, finished_at) "
                "VALUES ($1, $2, 'ok', $3, $4)",
                job.id,
                effect_id,
                started,
                datetime.now(UTC),
            )
            # Last, so the chain stays locked only for its own row and the commit.
            await connection.execute("SELECT pg_advisory_xact_lock($1)", CHAIN_LOCK)
            head = await connection.fetchval("SELECT hash FROM bench_peer_audit ORDER BY id DESC LIMIT 1")
            prev_hash = head or b""
            created_at = datetime.now(UTC)
            message = f"succeeded: effect {effect_id}"
            await connection.execute(
                "INSERT INTO bench_peer_audit (job_id, message, created_at, prev_hash, hash) "
                "VALUES ($1, $2, $3, $4, $5)",
                job.id,
                message,
                created_at,
                prev_hash,
                chained(prev_hash, audit_row(job.id, message, created_at)),
            )

    return write


@asynccontextmanager
async def create():
    import asyncpg
    from pgqueuer import PgQueuer
    from pgqueuer.models import Job

    dsn = os.environ["PGQUEUER_BENCH_DSN"]
    settings = {"application_name": os.environ.get("PGQUEUER_BENCH_APPNAME", "pgqueuer-bench")}
    connection = await asyncpg.connect(dsn, server_settings=settings)
    pool = None
    try:
        pgq = PgQueuer.from_asyncpg_connection(connection)
        if KIND == "ledger":
            size = int(os.environ.get("PGQUEUER_BENCH_POOL", "2"))
            pool = await asyncpg.create_pool(dsn, min_size=size, max_size=size, server_settings=settings)
            pgq.entrypoint(ENTRYPOINT)(ledger_job(pool))
        else:

            @pgq.entrypoint(ENTRYPOINT)
            async def noop(job: Job) -> None:
                return None

        yield pgq
    finally:
        if pool is not None:
            await pool.close()
        await connection.close()


def main() -> None:
    global ENTRYPOINT, KIND
    import pgqueuer

    try:
        import uvloop
    except ImportError:  # pgqueuer's own runner falls back the same way
        import asyncio as uvloop
    batch_size = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    ENTRYPOINT = sys.argv[2] if len(sys.argv) > 2 else ENTRYPOINT
    KIND = sys.argv[3] if len(sys.argv) > 3 else KIND
    if KIND not in ("noop", "ledger"):
        sys.exit(f"unknown kind {KIND!r}: noop or ledger")
    print(
        f"pgqueuer {pgqueuer.__version__} worker, batch size {batch_size}, entrypoint {ENTRYPOINT}, kind {KIND}",
        flush=True,
    )
    uvloop.run(pgqueuer.run(create, batch_size=batch_size))


if __name__ == "__main__":
    main()
