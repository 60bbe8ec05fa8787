"""Benchmark: end to end at idle, from a POST sent to its operation succeeded (the goal: p95
<= 100 ms).

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/opsconsole make bench-latency

A real gunicorn (``make serve``'s configuration, tests/faults/gunicorn.py) and a real ``qcluster``
(tests/faults/qcluster.py, the project's ORM broker) on a scratch database beside ``DATABASE_URL``.
One client posts a single ``prepare-brief`` event (``POST /api/v1/events``), then waits until it
succeeded, then idles ``LATENCY_GAP`` seconds (0.5) before the next, so every event meets an idle
cluster: ``LATENCY_EVENTS`` (60) events after ``LATENCY_WARMUP`` (5). The latency of one is the time
its ``succeeded`` audit event was written (the server's clock; the same machine's) minus the time
the client began sending it, so how often the client looks does not count. Reports p50, p95 and the
slowest, and the share of the time the POST's answer took. Nothing is asserted.
"""

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
EVENTS = int(os.environ.get("LATENCY_EVENTS", "60"))
WARMUP = int(os.environ.get("LATENCY_WARMUP", "5"))
GAP = float(os.environ.get("LATENCY_GAP", "0.5"))


def main() -> None:
    sys.path.insert(0, str(PROJECT_DIR))
    from bench.harness import run_in_scratch_database

    run_in_scratch_database("latency", run, keep=False)


def run(label: str) -> None:
    import django

    django.setup()
    import logging

    logging.getLogger("django-q").setLevel(logging.WARNING)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import httpx

    from ledger.core import accounts
    from tests.faults.gunicorn import running_gunicorn
    from tests.faults.qcluster import cluster_pool

    workspace, token = accounts.create_workspace(slug="bench-latency", approved_owners=["ops"], actor="bench")
    print(f"idle end to end on {label}: {EVENTS} events, {GAP} s apart, after {WARMUP} to warm up", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="opsconsole-latency-") as log_dir,
        running_gunicorn(Path(log_dir)) as server,
        cluster_pool(Path(log_dir)) as start,
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
    ):
        start("latency")
        totals, answers = [], []
        for n in range(WARMUP + EVENTS):
            total, answered = one_event(http, workspace, n)
            if n >= WARMUP:
                totals.append(total)
                answers.append(answered)
            time.sleep(GAP)
    report(totals, answers)


def one_event(http, workspace, n: int) -> tuple[float, float]:
    """Post one event; returns (ms from sending to its succeeded event, ms until the POST answered)."""
    from ledger.models import AuditEvent, Operation

    body = {"action": "prepare-brief", "data": {"request_id": f"L-{n}", "version": 1, "title": "t", "owner": "ops"}}
    sent = time.time()
    response = http.post("/api/v1/events", json=body)
    answered = time.time()
    response.raise_for_status()
    key = response.json()["key"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        event = (
            AuditEvent.objects.filter(operation__in=Operation.objects.filter(workspace=workspace, key=key))
            .filter(kind="succeeded")
            .values_list("created_at", flat=True)
            .first()
        )
        if event is not None:
            return (event.timestamp() - sent) * 1000, (answered - sent) * 1000
        time.sleep(0.005)
    raise RuntimeError(f"event {n} did not succeed within 30 s")


def report(totals: list[float], answers: list[float]) -> None:
    ordered = sorted(totals)
    p95 = ordered[max(0, round(0.95 * len(ordered)) - 1)]
    print()
    print("| idle end to end (POST sent -> succeeded) | ms |")
    print("|---|---|")
    print(f"| p50 | {statistics.median(totals):.0f} |")
    print(f"| p95 (goal <= 100) | {p95:.0f} |")
    print(f"| slowest | {ordered[-1]:.0f} |")
    print(f"| the POST's answer, p50 | {statistics.median(answers):.0f} |")


if __name__ == "__main__":
    main()
