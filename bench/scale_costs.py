"""What intake and claims cost per event on a small ledger and on a large one, for bench/scale.py.

Both through a real gunicorn as ``make serve`` runs it (tests/faults/gunicorn.py), one client:

- **intake**: ``POST /api/v1/events``, a new prepare-brief each (201);
- **claim**: ``POST /api/v1/claims`` of a new send-invoice, then its outcome (succeeded), the round
  trip of bench/scenario_claims.py (``ours_round_trip``).

The cost of an event is the CPU time (user + system) of the gunicorn's processes and of their
PostgreSQL backends over a batch of events, divided by their number (bench/cpu.py): on a shared
2-core machine wall time says how busy the machine was, CPU time what the work cost. Wall time per
event is printed beside it. ``SCALE_COST_ROUNDS`` rounds of ``SCALE_COST_EVENTS`` events each, intake
and claims interleaved; each figure is the median of its rounds. ``bench/scale.py`` measures once on
the sample it loads first and again on the full ledger, in the same process, and compares the two
(``compare``).
"""

from __future__ import annotations

import os
import statistics
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

ROUNDS = int(os.environ.get("SCALE_COST_ROUNDS", "7"))
EVENTS = int(os.environ.get("SCALE_COST_EVENTS", "400"))
APPNAME = "opsconsole-scale-cost"
WORKSPACE = "scale-cost"
GOAL = 1.2  # the large ledger's cost per event, at most this many times the small one's
SUBJECTS = ("intake", "claim")


@dataclass
class Costs:
    """One measurement: per subject, one figure per round."""

    label: str
    cpu_ms: dict[str, list[float]] = field(default_factory=lambda: {subject: [] for subject in SUBJECTS})
    wall_ms: dict[str, list[float]] = field(default_factory=lambda: {subject: [] for subject in SUBJECTS})

    def cpu(self, subject: str) -> float:
        return statistics.median(self.cpu_ms[subject])

    def wall(self, subject: str) -> float:
        return statistics.median(self.wall_ms[subject])


def prepare_workspace() -> str:
    """The workspace the events go to (apart from the loaded ones, which stay as loaded), with the
    demo's send-invoice for the claims; its API token."""
    from django.conf import settings

    from ledger.core import accounts
    from ledger.models import Workspace
    from tests.configured import apply_send_invoice

    workspace = Workspace.objects.filter(slug=WORKSPACE).first()  # a kept database's (SCALE_KEEP=1)
    if workspace is None:
        _, token = accounts.create_workspace(slug=WORKSPACE, approved_owners=["ops"], actor="bench")
    else:
        token = accounts.issue_token(workspace=workspace, name=f"bench {time.time_ns()}", actor="bench")
    # The caller's effect is nothing here: the destination, asked only after an expired lease, is never called.
    apply_send_invoice(settings.OPSCONSOLE_STANDIN_URL)
    return token


def fresh_token() -> str:
    """A token of the workspace issued now, in this process: its chain head (the token's audit
    event) comes to the top of the audit trail. Until then its last event is the one written
    before the load, below every loaded one, and the chain head lookup (a generic plan: the SQL
    functions force one) walks the primary key back through all of them to find it: 4.4 s at
    5,000,000 audit events, past gunicorn's 30 s at 25,000,000 (docs/performance.md). This call
    pays that walk once, outside what is measured."""
    from ledger.core import accounts
    from ledger.models import Workspace

    workspace = Workspace.objects.get(slug=WORKSPACE)
    return accounts.issue_token(workspace=workspace, name=f"bench {time.time_ns()}", actor="bench")


def intake_event(tag: str, n: int) -> dict:
    return {
        "action": "prepare-brief",
        "delivery_id": f"{tag}-{n}-d1",
        "data": {"request_id": f"{tag}-{n}", "version": 1, "title": f"Brief {n}", "owner": "ops"},
    }


def post_intake(http, body: dict) -> None:
    answer = http.post("/api/v1/events", json=body)
    if answer.status_code != 201:
        raise RuntimeError(f"POST /api/v1/events answered {answer.status_code}: {answer.text[:300]}")


class SmallCopy:
    """A copy of the database this process uses, as it is when ``create`` is called (``CREATE
    DATABASE .. TEMPLATE``), beside it as ``<name>_small``: the small ledger, measured after the
    large one is loaded, round for round with it."""

    def __init__(self):
        import environ
        from django.db import connection

        self.source = connection.settings_dict["NAME"]
        self.name = f"{self.source}_small"
        config = environ.Env.db_url_config(os.environ["DATABASE_URL"])
        self.params = {
            key: value
            for key, value in {
                "host": config.get("HOST") or "127.0.0.1",
                "port": config.get("PORT") or 5432,
                "user": config.get("USER") or None,
                "password": config.get("PASSWORD") or None,
            }.items()
            if value
        }
        self.url = os.environ["DATABASE_URL"].rsplit("/", 1)[0].split("?")[0] + f"/{self.name}"
        self.created = False

    def _admin(self, *statements: str) -> None:
        import psycopg

        with psycopg.connect(dbname="postgres", autocommit=True, **self.params) as admin:
            for statement in statements:
                admin.execute(statement)

    def create(self) -> None:
        from django.db import connections

        connections.close_all()  # a template must have no session
        started = time.perf_counter()
        self._admin(
            f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)',
            f'CREATE DATABASE "{self.name}" TEMPLATE "{self.source}"',
        )
        self.created = True
        print(f"  copied to {self.name} in {time.perf_counter() - started:.0f} s", flush=True)

    def drop(self) -> None:
        if self.created:
            self._admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def measure(databases: dict[str, tuple[str, str]], log_dir: Path) -> dict[str, Costs]:
    """``ROUNDS`` rounds against a gunicorn per database (label: its DATABASE_URL and a token of the
    workspace there), each round intake then claims, each of them on every database one after the
    other (in turn first)."""
    import httpx
    import psycopg

    from bench.cpu import CpuMeter
    from bench.scenario_claims import invoice, ours_round_trip
    from tests.faults.gunicorn import configured_workers, running_gunicorn

    calls = {
        "intake": (intake_event, post_intake),
        "claim": (invoice, ours_round_trip),
    }
    costs = {label: Costs(label) for label in databases}
    tag = f"{time.time_ns():x}"  # keys of this run's own (a kept database has those of the last)
    with ExitStack() as stack:
        clients, meters = {}, {}
        for number, (label, (url, token)) in enumerate(databases.items()):
            appname = f"{APPNAME}-{number}"
            server = stack.enter_context(running_gunicorn(log_dir, env={"PGAPPNAME": appname, "DATABASE_URL": url}))
            observer = stack.enter_context(psycopg.connect(url, autocommit=True))
            meters[label] = CpuMeter(observer, groups={server.process.pid}, application_name=appname)
            clients[label] = stack.enter_context(
                httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
            )
            for subject, (body, call) in calls.items():  # every worker has answered and holds its connection
                for n in range(30):
                    call(clients[label], body(f"{tag}-warm-{subject}", n))
        print(
            f"  a gunicorn per ledger ({configured_workers()} sync workers), one client; {ROUNDS} rounds of "
            f"{EVENTS} events per subject and ledger",
            flush=True,
        )
        labels = list(databases)
        for number in range(1, ROUNDS + 1):
            figures = []
            for subject, (body, call) in calls.items():
                for label in labels if number % 2 else reversed(labels):
                    bodies = [body(f"{tag}-{subject}-{number}", n) for n in range(EVENTS)]
                    http, meter = clients[label], meters[label]
                    before, started = meter.snapshot(), time.perf_counter()
                    for item in bodies:
                        call(http, item)
                    took, used = time.perf_counter() - started, meter.since(before)
                    costs[label].cpu_ms[subject].append((used.python + used.postgres) * 1000 / EVENTS)
                    costs[label].wall_ms[subject].append(took * 1000 / EVENTS)
                    lost = f", {used.backends_lost} backends lost" if used.backends_lost else ""
                    figures.append(
                        f"{subject} on {label}: {costs[label].cpu_ms[subject][-1]:.2f} ms CPU "
                        f"({used.python * 1000 / EVENTS:.2f} gunicorn + {used.postgres * 1000 / EVENTS:.2f} "
                        f"PostgreSQL), {costs[label].wall_ms[subject][-1]:.2f} ms wall{lost}"
                    )
            load = " ".join(f"{x:.2f}" for x in os.getloadavg())
            print(f"    round {number} (load average {load}):\n      " + "\n      ".join(figures), flush=True)
    return costs


def compare(small: Costs, large: Costs) -> list[str]:
    """A line per subject: the median cost on each, and the median of the rounds' ratios (each
    round measures both, one right after the other), PASS when it is at most ``GOAL``."""
    lines = [
        f"cost per event, {large.label} against {small.label} (CPU of gunicorn + PostgreSQL; "
        "the ratio is the median of the rounds' ratios)"
    ]
    for subject in SUBJECTS:
        ratios = [big / little for big, little in zip(large.cpu_ms[subject], small.cpu_ms[subject], strict=True)]
        ratio = statistics.median(ratios)
        walls = [big / little for big, little in zip(large.wall_ms[subject], small.wall_ms[subject], strict=True)]
        lines.append(
            f"  {subject:7} CPU {small.cpu(subject):6.2f} -> {large.cpu(subject):6.2f} ms, ratio {ratio:.2f} "
            f"(<= {GOAL}: {'PASS' if ratio <= GOAL else 'FAIL'}; rounds {' '.join(f'{r:.2f}' for r in ratios)}); "
            f"wall {small.wall(subject):6.2f} -> {large.wall(subject):6.2f} ms, ratio {statistics.median(walls):.2f}"
        )
    return lines
