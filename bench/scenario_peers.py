"""Scenario ``peers``, its HTTP half: intake of single events over HTTP against a bare
django-ninja endpoint behind the same gunicorn, at 1, 4 and 16 concurrent clients, with the CPU each
side spent per event.

- **Ours**: ``POST /api/v1/events``, one new prepare-brief event per request, gunicorn as ``make
  serve`` runs it (tests/faults/gunicorn.py: opsconsole/gunicorn.conf.py, 5 sync workers here).
- **Bare ninja** (bench/bare_ninja): ``POST /api/events``, the same bodies, under the same gunicorn
  configuration (the same worker count and class), one raw ``INSERT .. ON CONFLICT DO NOTHING`` of
  an operation-shaped row (``bench_bare_operation``, ``LIKE ledger_operation INCLUDING ALL``) in
  autocommit; Django and ninja, no middleware, no authentication.
- **Clients**: ``BENCH_PEER_CLIENTS`` (1, 4, 16) threads of this process, each with its own
  ``http.client`` connection, sending bodies JSON-encoded before the clock starts; HTTP/1.1
  keep-alive as the harness's httpx clients ask for it (gunicorn's sync workers answer
  ``Connection: close``, so each request opens a new loopback connection, for both sides). A
  measurement stops after ``BENCH_CONCURRENT_COUNT`` (4,000) requests or ``BENCH_CONCURRENT_SECONDS``
  (2.5), whichever comes first; the rate is what all clients did over the time it took.
- **CPU per event** (bench/cpu.py): user + system from ``/proc/<pid>/stat`` before and after each
  measurement, of each server's process group (master and workers: "Python") and of its backends
  (connections named by ``PGAPPNAME``: "PostgreSQL"). The rows pool the three concurrencies per
  round (CPU over all of them / events over all of them); the note gives each concurrency's median.

The drain half of ``peers`` (pgqueuer making the ledger's writes, CPU per operation) is measured with
scenarios 3 and 4, on their cluster (bench/scenario_queue.py).
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import threading
import time
from pathlib import Path

from bench.cpu import CpuMeter
from bench.harness import Rounds, Row, Series, env_int, prepare_bare_tables
from bench.scenario_intake import event

CLIENTS = tuple(int(n) for n in os.environ.get("BENCH_PEER_CLIENTS", "1,4,16").split(","))
CONCURRENT_COUNT = env_int("BENCH_CONCURRENT_COUNT", 4000)
CONCURRENT_SECONDS = float(os.environ.get("BENCH_CONCURRENT_SECONDS", "2.5"))
SIDES = {
    "ours": {"path": "/api/v1/events", "appname": "bench-gunicorn-ours"},
    "bare ninja": {"path": "/api/events", "appname": "bench-gunicorn-bare"},
}


class Clients:
    """``count`` threads, each with its own connection, posting pre-encoded bodies until they run out
    or the time is up. Returns (requests answered, seconds from the start to the last answer)."""

    def __init__(self, port: int, path: str, headers: dict[str, str]):
        self.port = port
        self.path = path
        self.headers = headers
        self.connection_headers: set[str] = set()

    def run(self, bodies: list[bytes], clients: int, *, budget: float = CONCURRENT_SECONDS) -> tuple[int, float]:
        shares = [bodies[number::clients] for number in range(clients)]
        done = [0] * clients
        errors: list[str] = []
        barrier = threading.Barrier(clients + 1)
        stop_at = [0.0]

        def client(number: int) -> None:
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            barrier.wait()
            try:
                for body in shares[number]:
                    connection.request("POST", self.path, body=body, headers=self.headers)
                    answer = connection.getresponse()
                    text = answer.read()
                    if answer.status != 201:
                        errors.append(f"{self.path} answered {answer.status}: {text[:300]!r}")
                        return
                    self.connection_headers.add(answer.getheader("Connection", "(none)"))
                    done[number] += 1
                    if time.perf_counter() > stop_at[0]:
                        return
            except Exception as exc:  # noqa: BLE001  reported below, with the others
                errors.append(f"{type(exc).__name__}: {exc}")
            finally:
                connection.close()

        threads = [threading.Thread(target=client, args=(number,), daemon=True) for number in range(clients)]
        for thread in threads:
            thread.start()
        stop_at[0] = time.perf_counter() + budget
        barrier.wait()
        started = time.perf_counter()
        for thread in threads:
            thread.join()
        took = time.perf_counter() - started
        if errors:
            raise RuntimeError(f"{len(errors)} client(s) failed; first: {errors[0]}")
        return sum(done), took


def scenario_http_intake(rounds: Rounds, log_dir: Path) -> list[Row]:
    import psycopg

    from ledger.core import accounts
    from ledger.intake import submit
    from ledger.models import Operation
    from tests.faults.gunicorn import configured_workers, running_gunicorn
    from tests.faults.qcluster import database_url

    workspace, token = accounts.create_workspace(slug="bench-peers-http", approved_owners=["ops"], actor="bench")
    submit.submit_event(workspace=workspace, raw=event("template", 0), source="cli")
    observer = psycopg.connect(database_url(), autocommit=True)
    prepare_bare_tables(observer, Operation.objects.filter(workspace=workspace).values_list("pk", flat=True).get())
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    rates = {
        (side, clients): Series(f"{side}, {clients} client{'s' if clients > 1 else ''}", "events/s")
        for side in SIDES
        for clients in CLIENTS
    }
    # Per (side, clients), one (Python s, PostgreSQL s, events, backends lost) per round; the harness's
    # own CPU (the clients) per (side, clients) in ms per request.
    used: dict[tuple[str, int], list[tuple[float, float, int, int]]] = {key: [] for key in rates}
    client_cpu: dict[tuple[str, int], list[float]] = {key: [] for key in rates}
    counter = {"tag": 0}
    try:
        with (
            running_gunicorn(log_dir, env={"PGAPPNAME": SIDES["ours"]["appname"]}) as ours,
            running_gunicorn(
                log_dir,
                app="bench.bare_ninja.wsgi",
                ready_path="/api/health",
                env={
                    "DJANGO_SETTINGS_MODULE": "bench.bare_ninja.settings",
                    "PGAPPNAME": SIDES["bare ninja"]["appname"],
                },
            ) as bare,
        ):
            servers = {"ours": ours, "bare ninja": bare}
            clients_of = {side: Clients(server.port, SIDES[side]["path"], headers) for side, server in servers.items()}
            meters = {
                side: CpuMeter(observer, groups={server.process.pid}, application_name=SIDES[side]["appname"])
                for side, server in servers.items()
            }
            print(
                f"  gunicorn: {configured_workers()} sync workers each; ours on {ours.url}, bare ninja on {bare.url}; "
                f"clients {', '.join(map(str, CLIENTS))}",
                flush=True,
            )

            def bodies(count: int) -> list[bytes]:
                counter["tag"] += 1
                return [json.dumps(event(f"peer{counter['tag']}", n)).encode() for n in range(count)]

            for side in SIDES:  # every worker has answered and holds its connection
                clients_of[side].run(bodies(16 * 6), 16, budget=30)

            def measure(side: str, clients: int):
                def run():
                    sent = bodies(CONCURRENT_COUNT)
                    before, client_before = meters[side].snapshot(), time.process_time()
                    done, took = clients_of[side].run(sent, clients)
                    use = meters[side].since(before)
                    client_cpu[(side, clients)].append((time.process_time() - client_before) * 1000 / done)
                    rates[(side, clients)].values.append(done / took)
                    used[(side, clients)].append((use.python, use.postgres, done, use.backends_lost))

                return f"{side} x{clients}", run

            loads = rounds.run(
                [measure(side, clients) for clients in CLIENTS for side in SIDES], label="peers HTTP intake"
            )
            written = {
                "ours": Operation.objects.filter(workspace=workspace).count() - 1,  # less the template's
                "bare ninja": observer.execute("SELECT count(*) FROM bench_bare_operation").fetchone()[0],
            }
    finally:
        observer.close()
    for side in SIDES:
        answered = 16 * 6 + sum(events for key, values in used.items() if key[0] == side for _, _, events, _ in values)
        if written[side] != answered:
            raise RuntimeError(f"{side}: {answered} events answered 201, {written[side]} rows written")
    rows = intake_rows(
        rates, used, client_cpu, connection_headers={s: c.connection_headers for s, c in clients_of.items()}
    )
    for row in rows:  # each round's load average beside its ratio; an overloaded round left out
        row.loads = loads
    return rows


def intake_rows(rates, used, client_cpu, *, connection_headers) -> list[Row]:
    median = statistics.median
    rows = [
        Row(
            "peers",
            f"HTTP intake, single events, {clients} client{'s' if clients > 1 else ''} vs bare ninja INSERT",
            rates[("ours", clients)],
            ">= 0.6",
            lambda r: r >= 0.6,
            baseline=rates[("bare ninja", clients)],
            note=f"client CPU (this process) per request: ours {median(client_cpu[('ours', clients)]):.2f} ms, "
            f"bare {median(client_cpu[('bare ninja', clients)]):.2f} ms"
            + (
                f"; Connection header of the answers: ours {', '.join(sorted(connection_headers['ours']))}, "
                f"bare {', '.join(sorted(connection_headers['bare ninja']))}"
                if clients == CLIENTS[0]
                else ""
            ),
        )
        for clients in CLIENTS
    ]
    rounds = len(next(iter(used.values())))

    def per_event(side: str, part: str, number: int) -> float:
        """ms of CPU per event in round ``number``, over every concurrency of that round."""
        entries = [used[(side, clients)][number] for clients in CLIENTS]
        seconds = sum(
            (python if part in ("Python", "both") else 0) + (postgres if part in ("PostgreSQL", "both") else 0)
            for python, postgres, _, _ in entries
        )
        return seconds * 1000 / sum(events for _, _, events, _ in entries)

    def by_concurrency(part_index: int) -> str:
        def median(side: str, clients: int) -> float:
            return statistics.median(v[part_index] * 1000 / v[2] for v in used[(side, clients)])

        return "; ".join(
            f"{clients} x: ours {median('ours', clients):.2f}, bare {median('bare ninja', clients):.2f}"
            for clients in CLIENTS
        )

    lost = {side: sum(v[3] for key, values in used.items() if key[0] == side for v in values) for side in SIDES}
    for part, index in (("Python", 0), ("PostgreSQL", 1), ("both", None)):
        series = {
            side: Series(f"{side}, {part}", "ms CPU per event", [per_event(side, part, n) for n in range(rounds)])
            for side in SIDES
        }
        note = ""
        if index is not None:
            note = f"ms per event by concurrency: {by_concurrency(index)}"
        if part == "Python":
            note += (
                "; user + system of the gunicorn process group (/proc/<pid>/stat, reaped children included); "
                f"PostgreSQL: the servers' backends, by application_name; backends that ended during a "
                f"measurement: ours {lost['ours']}, bare {lost['bare ninja']}"
            )
        rows.append(
            Row(
                "peers",
                f"HTTP intake CPU per event, {part}: ours vs bare ninja",
                series["ours"],
                "(shown)",
                None,
                baseline=series["bare ninja"],
                note=note,
            )
        )
    return rows
