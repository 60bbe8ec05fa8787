"""``make bench``: every scenario as ratios against a baseline measured in the same run.

    make bench                                  # installs requirements-bench.txt, then this
    .venv/bin/python bench/run.py               # the same, without the install
    BENCH_SCENARIOS=1,2 BENCH_ROUNDS=5 .venv/bin/python bench/run.py

Scenarios (bench/scenario_intake.py, bench/scenario_queue.py, bench/scenario_peers.py; worker memory, scenario 6, is
``make bench-memory``, bench/worker_memory.py):

1. intake of one event in-process (new, duplicate) vs a raw ``INSERT .. ON CONFLICT DO NOTHING``;
   dead tuples and queue rows per event; the Powertools peer;
2. a batch of 500 over HTTP (gunicorn) per event vs single POSTs, and vs the Powertools peer
   behind the same gunicorn with the same endpoint shape;
3. burst vs backlog drain with a qcluster; queue rows per event;
4. drain vs django-q2 no-op tasks and vs pgqueuer no-op jobs; an external batch with 100 ms per
   call vs the same calls one at a time;

claims (bench/scenario_claims.py): the claim -> outcome round trip over HTTP, per
operation, vs Powertools' ``idempotent_function`` on Redis behind the same gunicorn configuration.

peers: HTTP intake of single events at 1, 4 and 16 clients vs a bare django-ninja
``INSERT .. ON CONFLICT`` endpoint behind the same gunicorn (bench/scenario_peers.py); the drain vs
pgqueuer making the ledger's writes and vs its no-op at its default batch (with scenarios 3 and 4,
on their cluster); CPU per event and per operation of each side, from ``/proc``. (The batch
of 500 vs Powertools behind the same gunicorn is scenario 2.)

Each scenario interleaves its subjects with their baselines, round after round, and the table shows
medians and the median of the per-round ratios: ``BENCH_QUICK_ROUNDS`` (5) rounds of scenarios 1, 2,
claims and peers' HTTP intake (a few seconds each), ``BENCH_ROUNDS`` (3) of scenarios 3 and 4 and
peers' drain (each fills backlogs of 2,000).
PostgreSQL only: ``DATABASE_URL`` names the server and a database whose name is reused (default
``postgres://postgres@127.0.0.1:5432/opsconsole``); that database is never touched: a scratch one,
``bench_ratios_<pid>_<name>``, is created beside it, migrated, and dropped at the end. Redis
(``BENCH_REDIS_URL``, default db 15) serves the Powertools peer. ``BENCH_RESULTS=file.json`` also
writes every figure. See bench/README.md and docs/performance.md.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import (  # the project directory must be importable first
    PROJECT_DIR,
    Rounds,
    Row,
    env_int,
    prepare_environment,
    print_details,
    table_lines,
)

SCENARIOS = ("1", "2", "claims", "peers", "3", "4")


def describe_machine() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    from django.db import connection

    def package(name):
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        postgres = cursor.fetchone()[0]
        settings = {}
        for name in ("autovacuum", "fsync", "synchronous_commit", "shared_buffers"):
            cursor.execute(f"SHOW {name}")
            settings[name] = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")
        sessions = cursor.fetchone()[0]
    try:
        import redis

        redis_version = redis.Redis.from_url(os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")).info(
            "server"
        )["redis_version"]
    except Exception as exc:  # noqa: BLE001  shown, not fatal here
        redis_version = f"unreachable ({type(exc).__name__})"
    revision = os.environ.get("BENCH_REVISION") or _git_revision()
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "revision": revision,
        "cpus": os.cpu_count(),
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "memory": _memory(),
        "python": platform.python_version(),
        "postgresql": f"{postgres} ({', '.join(f'{k} {v}' for k, v in settings.items())}; "
        f"{sessions} client sessions at start)",
        "redis": redis_version,
        "packages": {
            name: package(name)
            for name in (
                "Django",
                "django-q2",
                "psycopg",
                "gunicorn",
                "pgqueuer",
                "asyncpg",
                "aws-lambda-powertools",
                "redis",
            )
        },
    }


def _git_revision() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT_DIR, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=PROJECT_DIR,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git work tree)"
    return f"{head}{' with uncommitted changes' if dirty else ''}"


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) // 1024} MiB"
    except OSError:
        pass
    return "unknown"


def main() -> int:
    prepare_environment()
    import environ

    url = os.environ["DATABASE_URL"]
    if environ.Env.db_url_config(url)["ENGINE"] != "django.db.backends.postgresql":
        sys.exit("bench/run.py measures on PostgreSQL: set DATABASE_URL to a postgres:// URL")
    chosen = [s.strip() for s in os.environ.get("BENCH_SCENARIOS", ",".join(SCENARIOS)).split(",") if s.strip()]
    unknown = set(chosen) - set(SCENARIOS)
    if unknown:
        sys.exit(f"unknown scenario(s) {sorted(unknown)}; known: {', '.join(SCENARIOS)} (6: make bench-memory)")
    rounds = Rounds(env_int("BENCH_ROUNDS", 3))
    quick_rounds = Rounds(env_int("BENCH_QUICK_ROUNDS", 5))
    if min(rounds.rounds, quick_rounds.rounds) < 3:
        print("note: fewer than 3 rounds; a spread needs at least 3")

    from bench.drain import ScratchDatabase

    began = time.monotonic()
    rows: list[Row] = []
    failures: list[str] = []
    durations: dict[str, float] = {}
    machine: dict = {}
    with tempfile.TemporaryDirectory(prefix="opsconsole-bench-") as scratch_dir:
        scratch = ScratchDatabase(url, Path(scratch_dir), prefix=f"bench_ratios_{os.getpid()}")
        os.environ["DATABASE_URL"] = scratch.url
        try:
            import django

            django.setup()
            import logging

            logging.getLogger("django-q").setLevel(logging.WARNING)  # not a line per enqueued task
            from django.core.management import call_command

            call_command("migrate", verbosity=0)
            machine = describe_machine()
            print(f"opsconsole benchmarks, {machine['date']}, revision {machine['revision']}")
            print(
                f"machine: {machine['cpus']} CPUs, {machine['memory']}, "
                f"load average {machine['load average at start']}; Python {machine['python']}; "
                f"PostgreSQL {machine['postgresql']}; Redis {machine['redis']}"
            )
            print("packages: " + ", ".join(f"{k} {v}" for k, v in machine["packages"].items()))
            print(
                f"database: {scratch.label}; interleaved rounds: {quick_rounds.rounds} of scenarios 1, 2, claims "
                f"and peers' HTTP intake, {rounds.rounds} of 3, 4 and peers' drain; "
                f"scenarios {', '.join(chosen)}",
                flush=True,
            )

            from bench import scenario_claims, scenario_intake, scenario_peers, scenario_queue

            # 3, 4 and the drain half of peers share one cluster and one drain series.
            queued = {"3", "4", "peers"} & set(chosen)
            plan = {
                "1": lambda: scenario_intake.scenario_intake(quick_rounds),
                "2": lambda: scenario_intake.scenario_batches(quick_rounds, Path(scratch_dir)),
                "claims": lambda: scenario_claims.scenario_claims(quick_rounds, Path(scratch_dir)),
                "peers": lambda: scenario_peers.scenario_http_intake(quick_rounds, Path(scratch_dir)),
                "queues": lambda: scenario_queue.scenario_queues(rounds, Path(scratch_dir), queued),
            }
            names = {"peers": "peers (HTTP)", "queues": "+".join(sorted(queued)) + " (queues)"}
            steps = [s for s in ("1", "2", "claims", "peers") if s in chosen] + (["queues"] if queued else [])
            for step in steps:
                name = names.get(step, step)
                started = time.monotonic()
                print(f"\nscenario {name}:", flush=True)
                try:
                    found = plan[step]()
                    rows += found
                except Exception:  # noqa: BLE001  report it, go on with the other scenarios
                    failures.append(name)
                    print(f"scenario {name} FAILED:\n{traceback.format_exc()}", flush=True)
                durations[name] = time.monotonic() - started
                print(f"scenario {name}: {durations[name]:.0f} s", flush=True)
        finally:
            scratch.drop()

    print_details(rows)
    print("\nResults (median of the rounds; ratio = median of the per-round ratios subject / baseline):")
    print("\n".join(table_lines(rows)))
    print("\nThe same, as Markdown:")
    print("\n".join(table_lines(rows, markdown=True)))
    total = time.monotonic() - began
    print(f"\ntook {total:.0f} s ({', '.join(f'{k}: {v:.0f} s' for k, v in durations.items())})")
    if results := os.environ.get("BENCH_RESULTS"):
        Path(results).write_text(
            json.dumps(
                {
                    "machine": machine,
                    "rounds": {
                        "1-2": quick_rounds.rounds,
                        "claims": quick_rounds.rounds,
                        "peers HTTP": quick_rounds.rounds,
                        "3-4": rounds.rounds,
                        "peers drain": rounds.rounds,
                    },
                    "seconds": round(total),
                    "durations": durations,
                    "failures": failures,
                    "rows": [
                        {
                            "scenario": row.scenario,
                            "name": row.name,
                            "unit": row.subject.unit,
                            "values": row.subject.values,
                            "median": row.subject.median,
                            "baseline": None
                            if row.baseline is None
                            else {
                                "name": row.baseline.name,
                                "unit": row.baseline.unit,
                                "values": row.baseline.values,
                                "median": row.baseline.median,
                            },
                            "ratios": row.ratios,
                            "loads": row.loads,
                            "ratio": row.ratio,
                            "target": row.target,
                            "met": row.verdict,
                            "note": row.note,
                        }
                        for row in rows
                    ],
                },
                indent=2,
            )
            + "\n"
        )
        print(f"figures written to {results}")
    if failures:
        print(f"FAILED: scenario(s) {', '.join(failures)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
