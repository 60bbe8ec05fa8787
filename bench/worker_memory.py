"""``make bench-memory``, scenario 6: worker memory over 100,000 operations.

    make bench-memory                    # = .venv/bin/python bench/worker_memory.py
    BENCH_MEMORY_COUNT=10000 .venv/bin/python bench/worker_memory.py     # a shorter run

One real qcluster (2 workers) drains ``BENCH_MEMORY_COUNT`` (100,000) prepare-brief operations while
this process submits them through ``ledger.intake.submit.submit_batch``, 500 at a time, each event nudging
the cluster as intake does. Every ``BENCH_MEMORY_INTERVAL`` seconds (1) a thread reads ``VmRSS`` from
``/proc/<pid>/status`` of every process in the cluster's process group (``QCluster.pids()``) and how
many operations have succeeded. Roles come from the cluster's own log (``ready for work at <pid>``:
a worker; ``pushing tasks``: the pusher; ``monitoring``: the monitor; the group leader: the main
process; the rest: the sentinel).

Workers are not recycled during the run (``bench/no_recycle_settings.py``: django-q2 would replace
a worker after 500 tasks, which hides what a process accumulates); ``BENCH_MEMORY_RECYCLE=1`` runs
the project's settings as deployed instead. The reference point is each worker's RSS once
``BENCH_MEMORY_WARMUP`` (1 %) of the operations have succeeded (imports done, caches filled); the
verdict: every worker's largest RSS after that stays within 20 % of it. ``BENCH_MEMORY_SAMPLES=file.csv``
writes every sample. PostgreSQL only; a scratch database ``bench_memory_<pid>_<name>`` as bench/run.py.
"""

from __future__ import annotations

import csv
import os
import re
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import Row, Series, env_int, prepare_environment, table_lines

COUNT = env_int("BENCH_MEMORY_COUNT", 100_000)
CHUNK = 500
INTERVAL = float(os.environ.get("BENCH_MEMORY_INTERVAL", "1"))
WARMUP = float(os.environ.get("BENCH_MEMORY_WARMUP", "0.01"))
RECYCLE = os.environ.get("BENCH_MEMORY_RECYCLE", "") not in ("", "0")
LIMIT = 0.20
ROLES = (
    ("worker", re.compile(r"ready for work at (\d+)")),
    ("pusher", re.compile(r"pushing tasks at (\d+)")),
    ("monitor", re.compile(r"monitoring at (\d+)")),
)


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


@dataclass
class Sample:
    seconds: float
    succeeded: int
    rss: dict[int, int]  # pid -> KiB


class Sampler(threading.Thread):
    """Samples the cluster's processes and the succeeded count, from a database connection of its own."""

    def __init__(self, cluster):
        super().__init__(daemon=True, name="rss-sampler")
        self.cluster = cluster
        self.samples: list[Sample] = []
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self):
        from django.db import connection

        from ledger.models import Operation
        from ledger.states import State

        began = time.monotonic()
        try:
            while not self.done.is_set():
                rss = {pid: kib for pid in self.cluster.pids() if (kib := rss_kib(pid)) is not None}
                succeeded = Operation.objects.filter(state=State.SUCCEEDED).count()
                self.samples.append(Sample(time.monotonic() - began, succeeded, rss))
                self.done.wait(INTERVAL)
        except BaseException as exc:  # noqa: BLE001  reported by the main thread
            self.error = exc
        finally:
            connection.close()

    def latest(self) -> Sample | None:
        return self.samples[-1] if self.samples else None


def roles(cluster) -> dict[int, str]:
    found = {cluster.pid: "main"}
    text = cluster.log_text()
    for role, pattern in ROLES:
        for match in pattern.finditer(text):
            found[int(match.group(1))] = role
    return found


def main() -> int:
    prepare_environment()
    from bench.drain import ScratchDatabase

    url = os.environ["DATABASE_URL"]
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="opsconsole-bench-memory-") as scratch_dir:
        scratch = ScratchDatabase(url, Path(scratch_dir), prefix=f"bench_memory_{os.getpid()}")
        if scratch.postgres is None:
            sys.exit("bench/worker_memory.py measures on PostgreSQL: set DATABASE_URL to a postgres:// URL")
        os.environ["DATABASE_URL"] = scratch.url
        try:
            result = measure(Path(scratch_dir), scratch.label)
        finally:
            scratch.drop()
    print(f"took {time.monotonic() - began:.0f} s")
    return result


def measure(log_dir: Path, label: str) -> int:
    import logging

    import django

    django.setup()
    logging.getLogger("django-q").setLevel(logging.WARNING)
    from django.core.management import call_command

    from ledger.core import accounts
    from ledger.intake import submit
    from tests.faults.qcluster import PROJECT_DIR, cluster_pool, operation_states, wait_for

    call_command("migrate", verbosity=0)
    workspace, _ = accounts.create_workspace(slug="bench-memory", approved_owners=["ops"], actor="bench")
    env = {"Q_TIMEOUT": "90", "Q_RETRY": "120"}
    if not RECYCLE:
        env |= {
            "DJANGO_SETTINGS_MODULE": "bench.no_recycle_settings",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_DIR), os.environ.get("PYTHONPATH")])),
        }
    print(
        f"database: {label}; {COUNT:,} prepare-brief operations, one qcluster (2 workers, "
        f"{'recycled as deployed' if RECYCLE else 'not recycled'}), RSS sampled every {INTERVAL:g} s",
        flush=True,
    )

    with cluster_pool(log_dir, env=env) as start:
        cluster = start("memory")
        sampler = Sampler(cluster)
        sampler.start()
        time.sleep(2 * INTERVAL)  # the idle figure, before any work
        started = time.monotonic()
        next_report = 0.1
        try:
            for offset in range(0, COUNT, CHUNK):
                events = [
                    {
                        "action": "prepare-brief",
                        "delivery_id": f"m-{n}-d1",
                        "data": {"request_id": f"m-{n}", "version": 1, "title": f"Brief {n}", "owner": "ops"},
                    }
                    for n in range(offset, min(offset + CHUNK, COUNT))
                ]
                results = submit.submit_batch(workspace=workspace, raw_events=events, source="cli")
                if {result.outcome for result in results} != {"accepted"}:
                    raise RuntimeError("intake did not accept every event")
                if cluster.exited():
                    raise RuntimeError(f"the cluster exited\n{cluster.log_tail()}")
                if (offset + CHUNK) / COUNT >= next_report:
                    sample = sampler.latest()
                    print(
                        f"  submitted {offset + CHUNK:,}, succeeded {sample.succeeded if sample else 0:,} "
                        f"after {time.monotonic() - started:.0f} s",
                        flush=True,
                    )
                    next_report += 0.1
            print(f"  all submitted after {time.monotonic() - started:.0f} s", flush=True)

            def all_succeeded() -> bool:
                if sampler.error is not None:
                    raise sampler.error
                return (sampler.latest() or Sample(0, 0, {})).succeeded >= COUNT

            wait_for(
                all_succeeded,
                timeout=3600,
                interval=1,
                clusters=(cluster,),
                describe=lambda: str(operation_states()),
                message="the operations did not all succeed",
            )
            time.sleep(INTERVAL)
        finally:
            sampler.done.set()
            sampler.join(timeout=30)
        took = time.monotonic() - started
        named = roles(cluster)
    if sampler.error:
        raise sampler.error
    return report(sampler.samples, named, took)


def report(samples: list[Sample], named: dict[int, str], took: float) -> int:
    if path := os.environ.get("BENCH_MEMORY_SAMPLES"):
        pids = sorted({pid for sample in samples for pid in sample.rss})
        with open(path, "w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(["seconds", "succeeded", *(f"{named.get(pid, 'sentinel')}-{pid}" for pid in pids)])
            for sample in samples:
                writer.writerow([f"{sample.seconds:.1f}", sample.succeeded, *(sample.rss.get(pid, "") for pid in pids)])
        print(f"samples written to {path}")

    warm_at = next((s for s in samples if s.succeeded >= WARMUP * COUNT), samples[-1])
    idle = samples[0]
    print(
        f"\n{COUNT:,} operations in {took:.0f} s ({COUNT / took:.0f}/s); {len(samples)} samples; reference point "
        f"at {warm_at.succeeded:,} succeeded ({warm_at.seconds:.0f} s)"
    )
    print(f"{'process':<18} {'idle MiB':>9} {'ref MiB':>8} {'end MiB':>8} {'max MiB':>8} {'max/ref':>8}")
    growth = {}
    for pid in sorted({pid for s in samples for pid in s.rss}, key=lambda p: (named.get(p, "sentinel"), p)):
        role = named.get(pid, "sentinel")
        after = [s.rss[pid] for s in samples if s.seconds >= warm_at.seconds and pid in s.rss]
        if not after:
            continue
        reference, end, peak = warm_at.rss.get(pid, after[0]), after[-1], max(after)
        ratio = peak / reference
        if role == "worker":
            growth[pid] = ratio - 1
        idle_mib = f"{idle.rss[pid] / 1024:.1f}" if pid in idle.rss else "-"
        print(
            f"{role + ' ' + str(pid):<18} {idle_mib:>9} {reference / 1024:8.1f} {end / 1024:8.1f} "
            f"{peak / 1024:8.1f} {ratio:8.3f}"
        )
    workers = [pid for pid, role in named.items() if role == "worker"]
    if len(workers) > 2:
        print(f"note: {len(workers)} worker processes were seen (recycled or reincarnated)")
    worst = max(growth.values()) if growth else float("nan")
    row = Row(
        "6",
        f"worker RSS growth over {COUNT:,} operations",
        Series("growth", "% of reference", [100 * worst]),
        "<= 20 %",
        lambda value: value <= 100 * LIMIT,
        note="largest RSS after the reference point / RSS at it, the worst worker",
    )
    print()
    print("\n".join(table_lines([row])))
    print()
    print("\n".join(table_lines([row], markdown=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
