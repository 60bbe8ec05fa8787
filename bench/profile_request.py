"""Benchmark: what one ``POST /api/v1/events`` of a single event costs behind a real gunicorn,
a new event and the same event again (a duplicate).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/opsconsole .venv/bin/python bench/profile_request.py
    REQUEST_TREES=before=/path/to/old-checkout,after=. .venv/bin/python bench/profile_request.py

A scratch database beside ``DATABASE_URL`` (never that one), migrated, one workspace with a
machine's token and an approver's (a person's token, whose answers reveal sensitive values). Each
checkout of ``REQUEST_TREES`` (default: this one) is served by its own gunicorn under its own
``opsconsole/gunicorn.conf.py``, all on the same database and this virtualenv, so two commits are
measured side by side in one run:

1. **Profile**: one gunicorn worker (``WEB_CONCURRENCY=1``) runs ``bench/profiled_wsgi.py``,
   cProfile (CPU time) around the whole WSGI call and a count of the statements Django sends.
   ``REQUEST_PROFILE_COUNT`` (300; 0: no profile) new events, then the same again as duplicates,
   one client: the top ``REQUEST_TOP`` (25) functions by cumulative and by own time of each, and
   the statements per request (with the machine's token, then the person's).
   ``REQUEST_PROFILE_DIR``: each profile also written there as ``NAME-new.prof`` and
   ``NAME-duplicate.prof`` (pstats). Not counted there: Django's connection health check
   (``CONN_HEALTH_CHECKS``, one ``SELECT 1`` per request on psycopg's own cursor), which the
   profile shows as ``is_usable``.
2. **Throughput**: ``make serve``'s worker count, no profiler; ``REQUEST_ROUNDS`` (5) rounds, each
   measuring every checkout at 1 and 4 concurrent clients (threads, each with its own
   ``httpx.Client``), new events then the same events again; the order rotated per round. A
   measurement stops after ``REQUEST_COUNT`` (400) requests or ``REQUEST_SECONDS`` (4) seconds.
   Reported per measurement: requests/s, and CPU per request (from ``/proc``, not wall time) of the
   gunicorn processes and of the PostgreSQL backends serving them: the median over the rounds with
   the lowest and highest, and for each checkout after the first the median of its per-round
   ratios to the first.

gunicorn's sync workers answer ``Connection: close``: each request opens a loopback connection,
whatever the client keeps. No qcluster runs: the first accepted event leaves the wake-up pending
(``ledger.core.nudges``), so later ones enqueue no task, as under a burst. Nothing is asserted.
"""

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
BENCH_DIR = PROJECT_DIR / "bench"
PROFILE_COUNT = int(os.environ.get("REQUEST_PROFILE_COUNT", "300"))
TOP = int(os.environ.get("REQUEST_TOP", "25"))
ROUNDS = int(os.environ.get("REQUEST_ROUNDS", "5"))
COUNT = int(os.environ.get("REQUEST_COUNT", "400"))
SECONDS = float(os.environ.get("REQUEST_SECONDS", "4"))
CLIENTS = (1, 4)
DUMP_DIR = os.environ.get("REQUEST_PROFILE_DIR", "")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def trees() -> dict[str, Path]:
    given = os.environ.get("REQUEST_TREES", "")
    if not given:
        return {"this": PROJECT_DIR}
    named = dict(part.split("=", 1) for part in given.split(","))
    return {name: Path(path).resolve() for name, path in named.items()}


def main() -> None:
    sys.path.insert(0, str(PROJECT_DIR))
    from bench.harness import run_in_scratch_database

    run_in_scratch_database("request", run, keep=False)


def run(label: str) -> None:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    tokens = make_tokens()
    checkouts = trees()
    print(f"one POST /api/v1/events on {label}; checkouts: {', '.join(f'{n}={p}' for n, p in checkouts.items())}")
    with tempfile.TemporaryDirectory(prefix="opsconsole-request-") as log_dir:
        for name, tree in checkouts.items() if PROFILE_COUNT else ():
            profile(name, tree, tokens, Path(log_dir))
        if ROUNDS:
            throughput(checkouts, tokens["machine"], Path(log_dir))


def make_tokens() -> dict[str, str]:
    """A workspace with a machine's token and an approver's (who may see sensitive values)."""
    from django.contrib.auth import get_user_model

    from ledger.core import accounts
    from ledger.models import Role

    workspace, machine = accounts.create_workspace(slug="bench-request", approved_owners=["ops"], actor="bench")
    approver = get_user_model().objects.create_user("bench-approver", password=None)
    accounts.set_membership(workspace=workspace, user=approver, role=Role.APPROVER, actor="bench")
    person = accounts.issue_token(workspace=workspace, name="approver", actor="bench", user=approver)
    return {"machine": machine, "person": person}


def event(tag: str, n: int) -> dict:
    return {
        "action": "prepare-brief",
        "delivery_id": f"{tag}-{n}-d1",
        "data": {"request_id": f"{tag}-{n}", "version": 1, "title": f"Brief {n}", "owner": "ops"},
    }


# --- the servers ------------------------------------------------------------------------------------


def server(tree: Path, log_dir: Path, name: str, *, profiled: bool):
    """A gunicorn serving ``tree``'s opsconsole (profiled: one worker under bench/profiled_wsgi.py)."""
    from tests.faults.gunicorn import Gunicorn

    env = {"WEB_CONCURRENCY": "1", "PYTHONPATH": str(BENCH_DIR)} if profiled else {}
    gunicorn = Gunicorn(
        log_dir=log_dir, env=env, app="profiled_wsgi:application" if profiled else "opsconsole.wsgi", tree=tree
    )
    gunicorn.log_path = log_dir / f"gunicorn-{name}-{'profiled' if profiled else 'plain'}.log"
    return gunicorn


def client(url: str, token: str):
    import httpx

    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def post(http, body: dict, expected: int) -> None:
    answer = http.post("/api/v1/events", json=body)
    if answer.status_code != expected:
        raise RuntimeError(f"POST /api/v1/events answered {answer.status_code}, not {expected}: {answer.text[:300]}")


# --- 1. the profile ---------------------------------------------------------------------------------


def profile(name: str, tree: Path, tokens: dict[str, str], log_dir: Path) -> None:
    if DUMP_DIR:
        Path(DUMP_DIR).mkdir(parents=True, exist_ok=True)
    gunicorn = server(tree, log_dir, name, profiled=True).start(timeout=60)
    try:
        with client(gunicorn.url, tokens["machine"]) as http:
            for n in range(20):  # imports, caches and the connection made before anything is profiled
                post(http, event(f"{name}-warm", n), 201)
            for kind, expected in (("new", 201), ("duplicate", 200)):
                http.post("/__bench__/reset")
                for n in range(PROFILE_COUNT):
                    post(http, event(f"{name}-profile", n), expected)
                print(f"\n=== {name}: {kind} events, machine token, {PROFILE_COUNT} requests ===")
                for sort in ("cumulative", "tottime"):
                    params = {"sort": sort, "limit": TOP}
                    if DUMP_DIR and sort == "cumulative":
                        params["dump"] = str(Path(DUMP_DIR).resolve() / f"{name}-{kind}.prof")
                    report = http.get("/__bench__/report", params=params).text
                    print(report if sort == "cumulative" else report.split("requests profiled:")[0])
        with client(gunicorn.url, tokens["person"]) as http:
            for kind, expected in (("new", 201), ("duplicate", 200)):
                http.post("/__bench__/reset")
                for n in range(50):
                    post(http, event(f"{name}-person", n), expected)
                report = http.get("/__bench__/report", params={"limit": 0}).text
                print(f"=== {name}: {kind} events, a person's token ===")
                print("requests profiled:" + report.split("requests profiled:")[1])
    finally:
        gunicorn.stop()


# --- 2. throughput and CPU per request --------------------------------------------------------------


def cpu_seconds(pids: set[int]) -> float:
    """User and system CPU of ``pids`` so far (a process gone is counted as nothing)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / CLOCK_TICKS


def gunicorn_pids(master: int) -> set[int]:
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return {master, *map(int, children)}


def backend_pids() -> set[int]:
    """The PostgreSQL backends of this database but this process's own (gunicorn's workers')."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend'"
        )
        return {pid for (pid,) in cursor.fetchall()}


def measure(gunicorn, token: str, bodies: list[dict], clients: int, expected: int) -> dict:
    """``bodies`` posted by ``clients`` concurrent clients until done or out of time."""
    pending = iter(bodies)
    lock = threading.Lock()
    done: list[dict] = []
    deadline = time.perf_counter() + SECONDS
    failures: list[BaseException] = []

    def work():
        try:
            with client(gunicorn.url, token) as http:
                while time.perf_counter() < deadline:
                    with lock:
                        body = next(pending, None)
                    if body is None:
                        return
                    post(http, body, expected)
                    with lock:
                        done.append(body)
        except Exception as exc:  # noqa: BLE001 (raised once the other clients stopped)
            failures.append(exc)

    workers = gunicorn_pids(gunicorn.process.pid)
    backends = backend_pids()
    cpu_before = cpu_seconds(workers), cpu_seconds(backends)
    started = time.perf_counter()
    threads = [threading.Thread(target=work) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took = time.perf_counter() - started
    backends |= backend_pids()
    if failures:
        raise failures[0]
    count = len(done)
    return {
        "bodies": done,
        "rps": count / took,
        "python_ms": (cpu_seconds(workers) - cpu_before[0]) * 1000 / count,
        "postgres_ms": (cpu_seconds(backends) - cpu_before[1]) * 1000 / count,
    }


def throughput(checkouts: dict[str, Path], token: str, log_dir: Path) -> None:
    servers = {name: server(tree, log_dir, name, profiled=False).start(timeout=60) for name, tree in checkouts.items()}
    figures: dict[tuple, dict[str, list[float]]] = {}
    try:
        for name, gunicorn in servers.items():  # every worker has answered, and holds its connection
            measure(gunicorn, token, [event(f"{name}-warm-plain", n) for n in range(60)], 4, 201)
        steps = [(name, clients) for name in servers for clients in CLIENTS]
        for number in range(ROUNDS):
            shift = number % len(steps)
            for name, clients in steps[shift:] + steps[:shift]:
                tag = f"{name}-r{number}-c{clients}"
                new = measure(servers[name], token, [event(tag, n) for n in range(COUNT)], clients, 201)
                again = measure(servers[name], token, new["bodies"], clients, 200)
                for kind, result in (("new", new), ("duplicate", again)):
                    series = figures.setdefault((kind, clients, name), {})
                    for figure in ("rps", "python_ms", "postgres_ms"):
                        series.setdefault(figure, []).append(result[figure])
            print(f"  round {number + 1}/{ROUNDS} done", flush=True)
    finally:
        for gunicorn in servers.values():
            gunicorn.stop()
    report(figures, list(servers))


def report(figures: dict[tuple, dict[str, list[float]]], names: list[str]) -> None:
    """Per measurement, each checkout's median (lowest-highest), and every later checkout's per-round
    ratio to the first one's, as a median."""
    units = {"rps": "requests/s", "python_ms": "gunicorn CPU ms/request", "postgres_ms": "PostgreSQL CPU ms/request"}
    first, others = names[0], names[1:]
    columns = [f"{name} (median, low-high)" for name in names] + [f"{name} / {first}" for name in others]
    print()
    print("| event | clients | figure | " + " | ".join(columns) + " |")
    print("|---" * (3 + len(columns)) + "|")
    for kind in ("new", "duplicate"):
        for clients in CLIENTS:
            for figure, unit in units.items():
                values = {name: figures[(kind, clients, name)][figure] for name in names}
                cells = [f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" for v in values.values()]
                for name in others:
                    ratios = [b / a for a, b in zip(values[first], values[name], strict=True)]
                    cells.append(f"{statistics.median(ratios):.3f}")
                print(f"| {kind} | {clients} | {unit} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
