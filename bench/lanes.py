"""Benchmark: a drain of one workspace with 1 audit lane vs 4 (``Workspace.audit_lanes``).

    make bench-lanes                            # or: .venv/bin/python bench/lanes.py
    BENCH_COUNT=2000 BENCH_ROUNDS=3 .venv/bin/python bench/lanes.py

A workspace's audit chain is locked from an append until its transaction commits, so the appends of
one workspace go one commit at a time; with 4 lanes, appends to different lanes go at once. Two
drains of a backlog of ``BENCH_COUNT`` (2,000) pending prepare-brief operations, each measured with
1 lane and with 4, in rounds that alternate which goes first (``BENCH_ROUNDS``, 3):

- ``drainers``: 8 processes of their own (each its own connection), each claiming and finishing
  one operation per transaction (``process_due_operations(limit=1)``, with
  ``OPSCONSOLE_FINISH_IN_CLAIM_BATCH`` 1) until none is due: every commit appends to one lane, as
  intake of one event, a caller's claim and its report do.
- ``appends`` (what the drains are made of, alone): 8 processes each appending one event per
  transaction (``audit_chain.append``), each of another operation, ``BENCH_COUNT`` in all: the
  chain's lock and nothing else in common.
- ``qcluster``: one qcluster of 8 workers (``Q_WORKERS=8``) at the default claim batch, timed from
  the resume of a pause that held the backlog (as bench/drain.py): each batch's operations are
  finished as a set, one transaction whose events touch every lane.

Each figure is operations per second, the ratio is 4 lanes ÷ 1 lane of the same round, and each
round shows the 1-minute load average at its end (bench/README.md, "Load average"). PostgreSQL
only: a scratch database beside DATABASE_URL's (``bench_lanes_<name>``), dropped at the end.
"""

from __future__ import annotations

import logging
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import env_int, load_average, prepare_environment

COUNT = env_int("BENCH_COUNT", 2000)
ROUNDS = env_int("BENCH_ROUNDS", 3)
WORKERS = 8
LANES = (1, 4)


def main() -> None:
    prepare_environment()
    from bench.drain import run_on_scratch_database

    run_on_scratch_database(run, prefix="bench_lanes")


def run(log_dir: Path, database_label: str) -> None:
    import django

    django.setup()
    logging.getLogger("django-q").setLevel(logging.WARNING)
    from django.core.management import call_command

    from ledger.core import accounts

    call_command("migrate", verbosity=0)
    workspace, _ = accounts.create_workspace(slug="bench", approved_owners=["ops"], actor="bench")
    print(f"database: {database_label}; {COUNT} operations per drain, {WORKERS} workers, {ROUNDS} rounds")
    results = {
        "appends": in_processes(workspace, _append, "appends"),
        "drainers": in_processes(workspace, _drain, "drainers"),
        "qcluster": qcluster(workspace, log_dir),
    }
    verified = verify()
    print()
    for name, rounds in results.items():
        print(f"{name}:")
        for number, (rates, load) in enumerate(rounds, 1):
            print(
                f"  round {number}: 1 lane {rates[1]:7.0f} ops/s, 4 lanes {rates[4]:7.0f} ops/s, "
                f"ratio {rates[4] / rates[1]:.2f} (load {load:.2f})"
            )
        ratios = [rates[4] / rates[1] for rates, _ in rounds]
        print(
            f"  median: 1 lane {statistics.median(rates[1] for rates, _ in rounds):7.0f} ops/s, 4 lanes "
            f"{statistics.median(rates[4] for rates, _ in rounds):7.0f} ops/s, ratio {statistics.median(ratios):.2f}"
        )
    print(verified)


def in_processes(workspace, target, name: str) -> list[tuple[dict[int, float], float]]:
    """8 processes running ``target(number, start, workspace_id)`` at once, 1 lane vs 4 lanes, per round
    (the drainers' backlog submitted first)."""
    from django.db import connections

    from tests.faults.qcluster import submit_prepare_briefs

    rounds = []
    for number in range(ROUNDS):
        rates = {}
        for lanes in LANES if number % 2 == 0 else LANES[::-1]:
            set_lanes(workspace, lanes)
            if target is _drain:
                submit_prepare_briefs(workspace, COUNT, prefix=f"{name}-{number}-{lanes}")
            connections.close_all()  # the children open their own
            context = multiprocessing.get_context("fork")
            start = context.Barrier(WORKERS + 1)
            processes = [context.Process(target=target, args=(n, start, workspace.pk)) for n in range(WORKERS)]
            for process in processes:
                process.start()
            start.wait()
            started = time.perf_counter()
            for process in processes:
                process.join()
            rates[lanes] = COUNT / (time.perf_counter() - started)
            if any(process.exitcode for process in processes):
                sys.exit(f"one of the {name} failed (its traceback is above)")
        rounds.append((rates, load_average()))
    return rounds


def _append(number: int, start, workspace_id: int) -> None:
    """One appender process: its share of ``COUNT`` events, each of its own operation, one per transaction."""
    from django.db import transaction

    from ledger.core import audit_chain
    from ledger.models import AuditEvent

    share = COUNT // WORKERS
    start.wait()
    for n in range(share):
        with transaction.atomic():
            audit_chain.append(
                [
                    AuditEvent(
                        workspace_id=workspace_id, operation_id=number * share + n + 1, actor="bench", kind="bench"
                    )
                ]
            )


def _drain(number: int, start, workspace_id: int) -> None:
    """One drainer process: one operation per transaction until none is due (a claim of one, and no
    set of more finished in it: ``OPSCONSOLE_FINISH_IN_CLAIM_BATCH`` 1 in this process)."""
    from django.conf import settings

    from ledger.engine.processing import process_due_operations

    settings.OPSCONSOLE_FINISH_IN_CLAIM_BATCH = 1
    start.wait()
    while process_due_operations(limit=1, worker=f"drainer-{number}"):
        pass


def qcluster(workspace, log_dir: Path) -> list[tuple[dict[int, float], float]]:
    """One qcluster of 8 workers draining a held backlog, 1 lane vs 4 lanes, per round."""
    from django.conf import settings
    from django_q.models import OrmQ

    from ledger.models import Operation
    from ledger.people import pause
    from ledger.states import State
    from tests.faults.qcluster import cluster_pool, submit_prepare_briefs, wait_for

    OrmQ.objects.all().delete()  # the drainers' nudges, which no cluster ran
    rounds = []
    with cluster_pool(log_dir, env={"Q_WORKERS": str(WORKERS)}) as start:
        cluster = start("lanes")
        print(f"qcluster: {WORKERS} workers, claim batch {settings.OPSCONSOLE_CLAIM_BATCH}")
        for number in range(-1, ROUNDS):  # round -1: a warm-up (workers connected, code imported), untimed
            rates = {}
            for lanes in LANES if number % 2 == 0 else LANES[::-1]:
                set_lanes(workspace, lanes)
                pause.set_paused(paused=True, actor="bench", reason="hold the backlog")
                submit_prepare_briefs(workspace, COUNT, prefix=f"qcluster-{number}-{lanes}")
                wait_for(
                    lambda: not OrmQ.objects.exists(), timeout=600, clusters=(cluster,), message="nudges did not run"
                )
                done = Operation.objects.filter(state=State.SUCCEEDED).count() + COUNT
                started = time.perf_counter()
                pause.set_paused(paused=False, actor="bench")
                wait_for(
                    lambda done=done: Operation.objects.filter(state=State.SUCCEEDED).count() >= done,
                    timeout=600,
                    interval=0.02,
                    clusters=(cluster,),
                    message="the backlog did not drain",
                )
                rates[lanes] = COUNT / (time.perf_counter() - started)
                wait_for(
                    lambda: not OrmQ.objects.exists(), timeout=600, clusters=(cluster,), message="nudges did not run"
                )
            if number >= 0:
                rounds.append((rates, load_average()))
    return rounds


def set_lanes(workspace, lanes: int) -> None:
    from ledger.core import accounts

    accounts.set_audit_lanes(workspace, lanes=lanes, actor="bench")


def verify() -> str:
    """Untimed: every lane of the workspace linked and every MAC holding, after all the rounds."""
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("verify_audit", "--no-heads", stdout=out, stderr=StringIO())  # not its warning: no heads here
    return out.getvalue().splitlines()[-1]


if __name__ == "__main__":
    main()
