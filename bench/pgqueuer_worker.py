"""The pgqueuer peer of scenario 4: a worker process with one no-op entrypoint.

bench/scenario_queue.py starts two of these, each its own process:

    PGQUEUER_BENCH_DSN=postgres://... python bench/pgqueuer_worker.py [BATCH_SIZE [ENTRYPOINT]]

It runs the way ``pgq run bench.pgqueuer_worker:create`` would (``pgqueuer.run``: the same
supervisor, SIGTERM/SIGINT handling and uvloop; batch size 10, pgqueuer's default), without the
command line itself, whose ``--log-level`` default fails in pgqueuer 1.6.0 (``'str' object has no
attribute 'name'``). Standard library, asyncpg and pgqueuer only: it never imports Django.
"""

import os
import sys
from contextlib import asynccontextmanager

import asyncpg
import pgqueuer
from pgqueuer import PgQueuer
from pgqueuer.models import Job

ENTRYPOINT = "noop"  # the job name this worker takes: one per batch size, so each pair has its own jobs


@asynccontextmanager
async def create():
    connection = await asyncpg.connect(os.environ["PGQUEUER_BENCH_DSN"])
    try:
        pgq = PgQueuer.from_asyncpg_connection(connection)

        @pgq.entrypoint(ENTRYPOINT)
        async def noop(job: Job) -> None:
            return None

        yield pgq
    finally:
        await connection.close()


def main() -> None:
    global ENTRYPOINT
    try:
        import uvloop
    except ImportError:  # pgqueuer's own runner falls back the same way
        import asyncio as uvloop
    batch_size = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    ENTRYPOINT = sys.argv[2] if len(sys.argv) > 2 else ENTRYPOINT
    print(f"pgqueuer {pgqueuer.__version__} worker, batch size {batch_size}, entrypoint {ENTRYPOINT}", flush=True)
    uvloop.run(pgqueuer.run(create, batch_size=batch_size))


if __name__ == "__main__":
    main()
