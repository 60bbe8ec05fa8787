"""Benchmark: does one workspace's configured work slow another's events?

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/opsconsole make bench-tenant
    TENANT_TREES=before=/path/to/old-checkout,after=. make bench-tenant

A scratch database beside ``DATABASE_URL`` (never that one), migrated, two workspaces: ``quiet``,
whose events are measured, and ``hostile``, which holds

- a source whose rule maps ``title`` by ``[@, @] | [@, @] | …`` (``TENANT_STAGES``, 21 stages: 10.7 s
  per delivery before its budget). It is written to the table directly, as a rule saved before the
  check existed would be: saving refuses it now.
- an HTTP action whose schema holds the pattern ``^(a+)+$``, which its events meet with
  ``TENANT_PATTERN_LENGTH`` (25) ``a``s and a ``!`` (3.35 s on a backtracking engine, doubling
  per character). Saving takes it: RE2 runs it in linear time.

Each checkout of ``TENANT_TREES`` (default: this one) is served by its own gunicorn (``make serve``'s
configuration, tests/faults/gunicorn.py), all on the same database and this virtualenv. One client
posts the quiet workspace's events (``POST /api/v1/events``, a new ``prepare-brief`` each,
``TENANT_QUIET_GAP`` 0.05 s apart) for ``TENANT_SECONDS`` (8) seconds, in three phases: alone (the
baseline), while ``TENANT_HOSTILE_CLIENTS`` clients (default: one per gunicorn worker, 5 on 2 cores,
as a sender retrying its deliveries in parallel would) each send the hostile source a signed
delivery every ``TENANT_HOSTILE_GAP`` (0.2) seconds, and while they send the hostile action's events
instead. ``TENANT_ROUNDS`` (3) rounds, every phase of every checkout once per round, the order
rotated per round. Reported per checkout and phase: the quiet events' p50 and p95 (ms), the median of
the per-round ratios of their p50 to the same round's baseline, and what the hostile requests were
answered (status, p50 ms). No qcluster runs: the answer's latency is what a tenant's work could slow.
Nothing is asserted.
"""

import base64
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
ROUNDS = int(os.environ.get("TENANT_ROUNDS", "3"))
SECONDS = float(os.environ.get("TENANT_SECONDS", "8"))
STAGES = int(os.environ.get("TENANT_STAGES", "21"))
PATTERN_LENGTH = int(os.environ.get("TENANT_PATTERN_LENGTH", "25"))
HOSTILE_CLIENTS = int(os.environ.get("TENANT_HOSTILE_CLIENTS", "0"))  # 0: as many as gunicorn has workers
HOSTILE_GAP = float(os.environ.get("TENANT_HOSTILE_GAP", "0.2"))
QUIET_GAP = float(os.environ.get("TENANT_QUIET_GAP", "0.05"))
SECRET_ENV = "BENCH_TENANT_HOOK_SECRET"
WHSEC = "whsec_" + base64.b64encode(b"bench tenant isolation secret!!!").decode()
PHASES = ("alone", "doubling rule", "catastrophic pattern")


def trees() -> dict[str, Path]:
    given = os.environ.get("TENANT_TREES", "")
    if not given:
        return {"this": PROJECT_DIR}
    return {name: Path(path).resolve() for name, path in (part.split("=", 1) for part in given.split(","))}


def main() -> None:
    sys.path.insert(0, str(PROJECT_DIR))
    from bench.harness import run_in_scratch_database

    run_in_scratch_database("tenant", run, keep=False, extra_env={SECRET_ENV: WHSEC})


def run(label: str) -> None:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from tests.faults.gunicorn import Gunicorn, configured_workers

    tokens = make_tenants()
    checkouts = trees()
    clients = HOSTILE_CLIENTS or configured_workers()
    print(
        f"quiet events beside a hostile workspace on {label}: {STAGES} doublings, a pattern at "
        f"{PATTERN_LENGTH} characters, {clients} hostile clients every {HOSTILE_GAP} s; "
        f"checkouts: {', '.join(f'{name}={path}' for name, path in checkouts.items())}",
        flush=True,
    )
    quiet: dict[tuple[str, str], list[list[float]]] = defaultdict(list)
    hostile: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="opsconsole-tenant-") as log_dir:
        servers = {}
        try:
            for name, tree in checkouts.items():
                servers[name] = Gunicorn(log_dir=Path(log_dir), tree=tree)
                servers[name].log_path = Path(log_dir) / f"gunicorn-{name}.log"
                servers[name].start(timeout=60)
            for name in checkouts:  # each worker's first requests import and connect: not measured
                measure(servers[name].url, tokens, "alone", clients=0, tag=f"{name}-warm-up", seconds=3)
            measurements = [(name, phase) for name in checkouts for phase in PHASES]
            for round_number in range(ROUNDS):
                shift = round_number % len(measurements)
                for name, phase in measurements[shift:] + measurements[:shift]:
                    tag = f"{name}-{round_number}-{PHASES.index(phase)}"
                    latencies, answers = measure(servers[name].url, tokens, phase, clients=clients, tag=tag)
                    quiet[name, phase].append(latencies)
                    hostile[name, phase] += answers
                    print(f"  round {round_number + 1} {name:>8} {phase:<22} {summary(latencies)}", flush=True)
        finally:
            for server in servers.values():
                server.stop()
    report(checkouts, quiet, hostile)


def make_tenants() -> dict[str, str]:
    """The two workspaces, the hostile one's source and action; their tokens."""
    from ledger.core import accounts
    from ledger.integrations import saving
    from ledger.models import Destination, HttpAction, Source

    quiet, quiet_token = accounts.create_workspace(slug="quiet", approved_owners=["ops"], actor="bench")
    hostile, hostile_token = accounts.create_workspace(slug="hostile", approved_owners=["ops"], actor="bench")
    doubling = " | ".join(["[@, @]"] * STAGES)
    rule = {"event": "invoice.paid", "action": "prepare-brief", "data": {"request_id": "data.id", "version": "`1`"}}
    rule["data"] |= {"title": doubling, "owner": "'ops'"}
    # Written directly, as a rule saved before the check existed: save_source refuses it now.
    Source.objects.create(
        workspace=hostile, slug="hostile-hooks", scheme="standard_webhooks", secret_env=SECRET_ENV, rules=[rule]
    )
    destination = saving.save_destination(
        Destination(slug="nowhere", base_url="http://127.0.0.1:9", auth="none"), actor="bench"
    )
    schema = {
        "type": "object",
        "required": ["request_id", "note"],
        "properties": {"request_id": {"type": "string"}, "note": {"type": "string", "pattern": "^(a+)+$"}},
    }
    action = HttpAction(
        name="hostile-pattern",
        destination=destination,
        schema=schema,
        identity_fields=["request_id"],
        normalisers={"request_id": "identifier"},
        fingerprint_fields=["request_id", "note"],
        request={"method": "POST", "path": "/notes", "body": {"note": "{{ data.note }}"}},
    )
    saving.save_http_action(action, actor="bench")
    return {"quiet": quiet_token, "hostile": hostile_token}


def measure(
    url: str, tokens: dict[str, str], phase: str, *, clients: int, tag: str, seconds: float = SECONDS
) -> tuple[list[float], list[tuple[int, float]]]:
    """The quiet client's latencies (ms) over ``seconds``, with the phase's hostile clients running."""
    import httpx

    stop = threading.Event()
    answers: list[tuple[int, float]] = []
    hostile = [
        threading.Thread(target=hostile_client, args=(url, tokens["hostile"], phase, f"{tag}-{n}", stop, answers))
        for n in range(clients if phase != "alone" else 0)
    ]
    for thread in hostile:
        thread.start()
    latencies = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens['quiet']}"}, timeout=120) as http:
        ends = time.monotonic() + seconds
        n = 0
        while time.monotonic() < ends:
            body = {"action": "prepare-brief", "data": {"request_id": f"Q-{tag}-{n}", "version": 1}}
            body["data"] |= {"title": "t", "owner": "ops"}
            started = time.perf_counter()
            answer = http.post("/api/v1/events", json=body)
            latencies.append((time.perf_counter() - started) * 1000)
            if answer.status_code != 201:
                raise RuntimeError(f"a quiet event answered {answer.status_code}: {answer.text[:300]}")
            n += 1
            time.sleep(QUIET_GAP)
    stop.set()
    for thread in hostile:
        thread.join()  # what a hostile request still holds finishes before the next phase
    return latencies, answers


def hostile_client(url: str, token: str, phase: str, tag: str, stop: threading.Event, answers: list) -> None:
    import httpx

    with httpx.Client(base_url=url, timeout=120) as http:
        n = 0
        while not stop.is_set():
            started = time.perf_counter()
            try:
                status = hostile_request(http, token, phase, f"{tag}-{n}").status_code
            except httpx.TransportError:
                status = 0  # no answer: the worker was killed at gunicorn's timeout
            answers.append((status, (time.perf_counter() - started) * 1000))
            n += 1
            stop.wait(HOSTILE_GAP)


def hostile_request(http, token: str, phase: str, tag: str):
    if phase == "doubling rule":
        return post_delivery(http, tag)
    body = {"action": "hostile-pattern", "data": {"request_id": f"H-{tag}", "note": "a" * PATTERN_LENGTH + "!"}}
    return http.post("/api/v1/events", json=body, headers={"Authorization": f"Bearer {token}"})


def post_delivery(http, message_id: str):
    from standardwebhooks.webhooks import Webhook

    body = json.dumps({"type": "invoice.paid", "id": message_id, "data": {"id": message_id}})
    at = datetime.now(UTC)
    headers = {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(WHSEC).sign(message_id, at, body),
        "content-type": "application/json",
    }
    return http.post("/api/v1/hooks/hostile-hooks", content=body.encode(), headers=headers)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(share * len(ordered)) - 1)]


def summary(latencies: list[float]) -> str:
    return (
        f"{len(latencies)} events, p50 {statistics.median(latencies):.0f} ms, p95 {percentile(latencies, 0.95):.0f} ms"
    )


def report(checkouts: dict, quiet: dict, hostile: dict) -> None:
    print()
    header = ("checkout", "hostile workspace sends", "quiet p50 ms", "quiet p95 ms", "p50 ÷ alone")
    print("| " + " | ".join(header) + " | hostile answers (p50 ms) |")
    print("|---|---|---|---|---|---|")
    for name in checkouts:
        alone = [statistics.median(latencies) for latencies in quiet[name, "alone"]]
        for phase in PHASES:
            rounds = quiet[name, phase]
            pooled = [latency for latencies in rounds for latency in latencies]
            ratio = statistics.median(
                [statistics.median(latencies) / base for latencies, base in zip(rounds, alone, strict=True)]
            )
            answers = hostile[name, phase]
            statuses = ", ".join(
                f"{count} × {status or 'no answer'}" for status, count in sorted(_count(answers).items())
            )
            said = f"{statuses} ({statistics.median([ms for _, ms in answers]):.0f})" if answers else "-"
            print(
                f"| {name} | {phase} | {statistics.median(pooled):.0f} | {percentile(pooled, 0.95):.0f} "
                f"| {ratio:.2f} | {said} |"
            )


def _count(answers: list[tuple[int, float]]) -> dict[int, int]:
    counts: dict[int, int] = defaultdict(int)
    for status, _ in answers:
        counts[status] += 1
    return counts


if __name__ == "__main__":
    main()
