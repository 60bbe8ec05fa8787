"""Scenario ``claims``: the claim -> outcome round trip, per operation, over HTTP, against
AWS Lambda Powertools' ``idempotent_function`` on Redis, behind the same HTTP server.

- **opsconsole**: ``POST /api/v1/claims`` (201 claimed) then ``POST /api/v1/claims/{key}/outcome``
  succeeded (200 recorded), one operation after another, one client, against gunicorn as ``make
  serve`` runs it (tests/faults/gunicorn.py) on PostgreSQL. The caller's effect is nothing here.
- **Powertools**: ``bench/powertools_server.py`` under the same gunicorn configuration (the same
  worker count, sync workers), one client, the same envelopes. ``idempotent_function``: one request
  per operation, which writes the in-progress record, runs the function (nothing) and writes the
  completed record, as a Lambda does. ``split``: the same two records in two requests, the endpoint
  shape of ours (``save_inprogress``, then ``save_success``: what the decorator calls).
  Each on two Redis servers: the machine's (``BENCH_REDIS_URL``; no persistence here: a restart
  loses every record) and a private ``redis-server`` started in a scratch directory on the same disk
  as PostgreSQL with ``appendonly yes``, ``appendfsync always`` (each write is in the fsynced AOF
  before Redis answers): the durability of a PostgreSQL commit with ``fsync`` and
  ``synchronous_commit`` on.

- **The two-request floor**: two ``POST /api/events`` of bench/bare_ninja per operation (one raw
  ``INSERT .. ON CONFLICT DO NOTHING`` each, autocommit), under the same gunicorn: the least any
  protocol of two requests (claim, then outcome) can cost here (goal >= 0.6).
- **Claim batches**: ``POST /api/v1/claims/batch`` of ``BENCH_CLAIM_BATCH`` (100) envelopes against
  as many single ``POST /api/v1/claims``, per operation claimed (goal >= 5).

The target: at least the rate of ``idempotent_function`` with the same durability (ratio
>= 1); the others are shown. ``BENCH_CLAIMS_COUNT`` (300) operations per measurement at most, within
``BENCH_SECONDS``.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
import warnings
from contextlib import ExitStack, contextmanager
from pathlib import Path
from urllib.parse import quote

from bench.harness import Rounds, Row, Series, env_int, prepare_bare_tables, rate, timed_calls

CLAIMS_COUNT = env_int("BENCH_CLAIMS_COUNT", 300)
CLAIM_BATCH = env_int("BENCH_CLAIM_BATCH", 100)
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")
OURS = "opsconsole claim+outcome"
TWO_BARE = "two bare ninja requests"
SINGLE_CLAIMS = "opsconsole single claims"
BATCHES = "opsconsole claim batches"
POWERTOOLS = [
    f"{shape}, Redis {persistence}"
    for shape in ("idempotent_function", "split")
    for persistence in ("no persistence", "AOF always")
]


def invoice(tag: str, n: int) -> dict:
    """A send-invoice envelope, distinct per (tag, n)."""
    return {
        "action": "send-invoice",
        "delivery_id": f"{tag}-{n}-d1",
        "data": {
            "request_id": f"{tag}-{n}",
            "version": 1,
            "customer_id": f"cus-{n % 97}",
            "amount_cents": 1000 + n,
            "currency": "EUR",
        },
    }


def invoice_result(body: dict) -> dict:
    return {"invoice": f"inv-{body['data']['request_id']}", "amount_cents": body["data"]["amount_cents"]}


# --- the durable Redis ------------------------------------------------------------------------------


@contextmanager
def durable_redis(log_dir: Path):
    """A private redis-server whose every write is fsynced to its append-only file before it answers.

    Its directory is made beside the bench's scratch files (``TMPDIR``), which must be on the disk
    PostgreSQL writes to for the comparison to hold (the harness prints both)."""
    from tests.faults.gunicorn import free_port

    port = free_port()
    directory = Path(tempfile.mkdtemp(prefix="redis-aof-", dir=log_dir))
    process = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(directory),
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
            "--logfile",
            str(directory / "redis.log"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        _wait_for_redis(url, process)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


def _wait_for_redis(url: str, process: subprocess.Popen) -> None:
    import redis

    deadline = time.monotonic() + 10
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"redis-server exited with {process.returncode}")
        try:
            redis.Redis.from_url(url).ping()
            return
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def redis_durability(url: str) -> str:
    import redis

    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        settings = {name: client.config_get(name).get(name) for name in ("appendonly", "appendfsync", "save")}
        directory = client.config_get("dir").get("dir")
    finally:
        client.close()
    durable = settings["appendonly"] == "yes" and settings["appendfsync"] == "always"
    summary = ", ".join(f"{name} {value!r}" for name, value in settings.items())
    verdict = "every write fsynced before the answer" if durable else "not fsynced per write"
    return f"{summary} in {directory} ({verdict})"


def postgres_durability() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        found = {}
        for name in ("fsync", "synchronous_commit", "wal_sync_method", "data_directory"):
            try:
                cursor.execute(f"SHOW {name}")
                found[name] = cursor.fetchone()[0]
            except Exception:  # noqa: BLE001  data_directory needs a superuser or pg_read_all_settings
                found[name] = "(not readable)"
    return ", ".join(f"{name} {value}" for name, value in found.items())


def forget_keys(url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


# --- the two sides ----------------------------------------------------------------------------------


def _expect(answer, status: int, what: str) -> dict:
    if answer.status_code != status:
        raise RuntimeError(f"{what} answered {answer.status_code} (expected {status}): {answer.text[:300]}")
    return answer.json()


def ours_round_trip(http, body: dict) -> None:
    claimed = _expect(http.post("/api/v1/claims", json=body), 201, "POST /api/v1/claims")
    if claimed["status"] != "claimed":
        raise RuntimeError(f"POST /api/v1/claims answered {claimed}")
    report = {
        "token": claimed["token"],
        "outcome": "succeeded",
        "external_id": f"inv-{body['data']['request_id']}",
        "result": invoice_result(body),
    }
    key = quote(claimed["key"], safe=":")
    recorded = _expect(http.post(f"/api/v1/claims/{key}/outcome", json=report), 200, "outcome")
    if recorded.get("state") != "succeeded":
        raise RuntimeError(f"the outcome answered {recorded}")


def bare_two_requests(http, body: dict) -> None:
    """The floor of a two-request protocol: two bare INSERT requests, one per half."""
    _expect(http.post("/api/events", json=body), 201, "bare POST /api/events")
    second = body | {"data": body["data"] | {"request_id": f"{body['data']['request_id']}-outcome"}}
    _expect(http.post("/api/events", json=second), 201, "bare POST /api/events")


# The lease of a claim the scenario never reports (single claims, batches): the longest the API
# allows, so that none expires during the run into unknown, which would send the cluster of the
# queues scenario after this one looking each up at a stand-in that is not there, without end.
UNREPORTED_LEASE_SECONDS = 3600


def ours_single_claim(http, body: dict) -> None:
    body = body | {"lease_seconds": UNREPORTED_LEASE_SECONDS}
    _expect(http.post("/api/v1/claims", json=body), 201, "POST /api/v1/claims")


def ours_claim_batches(http, tag: str, count: int) -> float:
    """Operations claimed per second through ``POST /api/v1/claims/batch`` of ``CLAIM_BATCH`` each."""
    bodies = [invoice(tag, n) | {"lease_seconds": UNREPORTED_LEASE_SECONDS} for n in range(count)]
    batches = [bodies[start : start + CLAIM_BATCH] for start in range(0, count, CLAIM_BATCH)]

    def post(batch: list) -> None:
        answered = _expect(http.post("/api/v1/claims/batch", json={"claims": batch}), 200, "claims batch")
        if any(result["status"] != "claimed" for result in answered["results"]):
            raise RuntimeError("a claim of the batch was not claimed")

    done, seconds = timed_calls(batches, post)
    return rate(done * CLAIM_BATCH, seconds)


def powertools_function(http, body: dict) -> None:
    _expect(http.post("/powertools/operations", json=body), 200, "POST /powertools/operations")


def powertools_split(http, body: dict) -> None:
    claimed = _expect(http.post("/powertools/claims", json=body), 201, "POST /powertools/claims")
    report = {"data": body, "result": invoice_result(body)}
    key = quote(claimed["key"], safe="")  # Powertools' keys are "prefix#hash"
    _expect(http.post(f"/powertools/claims/{key}/outcome", json=report), 200, "Powertools outcome")


def measure(http, call, tag: str, count: int) -> float:
    return rate(*timed_calls([invoice(tag, n) for n in range(count)], lambda body: call(http, body)))


# --- the scenario -----------------------------------------------------------------------------------


def scenario_claims(rounds: Rounds, log_dir: Path) -> list[Row]:
    import httpx
    import psycopg
    from django.conf import settings

    from ledger.core import accounts
    from ledger.intake import submit
    from ledger.models import Operation
    from tests.configured import apply_send_invoice
    from tests.faults.gunicorn import configured_workers, running_gunicorn
    from tests.faults.qcluster import database_url

    workspace, token = accounts.create_workspace(slug="bench-claims", approved_owners=["ops"], actor="bench")
    # The demo's send-invoice, from its integrations file (the caller's effect is nothing here, so
    # its destination, only asked after an expired lease, is never called).
    apply_send_invoice(settings.OPSCONSOLE_STANDIN_URL)
    # The bare service's table, its template a real operation of ours.
    submit.submit_event(workspace=workspace, raw=invoice("template", 0), source="cli")
    with psycopg.connect(database_url(), autocommit=True) as observer:
        prepare_bare_tables(observer, Operation.objects.filter(workspace=workspace).values_list("pk", flat=True).get())
    prefix = f"opsconsole-bench-claims-{uuid.uuid4().hex[:8]}"
    redis_urls = {"Redis, no persistence": REDIS_URL}
    # Powertools is bench's (requirements-bench.txt): without it, its lines are left out, said so.
    powertools = importlib.util.find_spec("aws_lambda_powertools") is not None
    with ExitStack() as stack:
        ours_server = stack.enter_context(running_gunicorn(log_dir))
        bare_server = stack.enter_context(
            running_gunicorn(
                log_dir,
                app="bench.bare_ninja.wsgi",
                ready_path="/api/health",
                env={"DJANGO_SETTINGS_MODULE": "bench.bare_ninja.settings"},
            )
        )
        ours_http = stack.enter_context(
            httpx.Client(base_url=ours_server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        )
        bare_http = stack.enter_context(httpx.Client(base_url=bare_server.url, timeout=60))
        subjects = {
            OURS: (ours_http, ours_round_trip),
            TWO_BARE: (bare_http, bare_two_requests),
            SINGLE_CLAIMS: (ours_http, ours_single_claim),
        }
        durability = {"PostgreSQL": postgres_durability()}
        if powertools:
            redis_urls["Redis AOF fsync always"] = stack.enter_context(durable_redis(log_dir))
            durability |= {name: redis_durability(url) for name, url in redis_urls.items()}
            stack.callback(lambda: [forget_keys(url, prefix) for url in redis_urls.values()])
            for url in redis_urls.values():
                env = {"POWERTOOLS_REDIS_URL": url, "POWERTOOLS_KEY_PREFIX": prefix}
                server = stack.enter_context(
                    running_gunicorn(log_dir, app="bench.powertools_server:app", ready_path="/health", env=env)
                )
                http = stack.enter_context(httpx.Client(base_url=server.url, timeout=60))
                persistence = "Redis no persistence" if url == REDIS_URL else "Redis AOF always"
                subjects[f"idempotent_function, {persistence}"] = (http, powertools_function)
                subjects[f"split, {persistence}"] = (http, powertools_split)
        else:
            print("  aws_lambda_powertools is not installed (requirements-bench.txt): its lines are left out")
        # The claim batch route, where the tree has it (an older tree does not).
        batched = ours_http.post("/api/v1/claims/batch", json={"claims": []}).status_code == 200
        print(f"  gunicorn: {configured_workers()} sync workers per server, one client, one operation at a time")
        for name, text in durability.items():
            print(f"  durability, {name}: {text}", flush=True)
        # Every line's series, those of the subjects left out empty (their lines are left out).
        series = {name: Series(name, "operations/s") for name in [*subjects, *POWERTOOLS, BATCHES]}
        for number, (http, call) in enumerate(subjects.values()):
            measure(http, call, f"warm{number}", 30)  # every worker has answered once

        def step(name: str):
            http, call = subjects[name]

            def run():
                tag = f"r{len(series[name].values)}-{uuid.uuid4().hex[:6]}"
                series[name].values.append(measure(http, call, tag, CLAIMS_COUNT))

            return name, run

        def batches():
            tag = f"b{len(series[BATCHES].values)}-{uuid.uuid4().hex[:6]}"
            series[BATCHES].values.append(ours_claim_batches(ours_http, tag, CLAIMS_COUNT))

        steps = [step(name) for name in subjects]
        if batched:
            ours_claim_batches(ours_http, "warm-batch", CLAIM_BATCH)
            steps.append((BATCHES, batches))
        rounds.run(steps, label="claims")

    ours = series[OURS]
    note = (
        "durability: opsconsole a PostgreSQL commit (fsync on, synchronous_commit on) per request; "
        "Powertools on Redis with appendfsync always (its AOF fsynced per write)"
    )
    queries = queries_per_round_trip(token)
    rows = [
        Row(
            "claims",
            "claim+outcome over HTTP vs idempotent_function, same durability (AOF always)",
            ours,
            ">= 1",
            lambda r: r >= 1,
            baseline=series["idempotent_function, Redis AOF always"],
            note=note,
        ),
        Row(
            "claims",
            "claim+outcome over HTTP vs idempotent_function, Redis without persistence",
            ours,
            "(shown)",
            None,
            baseline=series["idempotent_function, Redis no persistence"],
        ),
        Row(
            "claims",
            "claim+outcome over HTTP vs Powertools split in two requests, AOF always",
            ours,
            "(shown)",
            None,
            baseline=series["split, Redis AOF always"],
        ),
        Row(
            "claims",
            "claim+outcome over HTTP vs Powertools split in two requests, no persistence",
            ours,
            "(shown)",
            None,
            baseline=series["split, Redis no persistence"],
        ),
        Row(
            "claims",
            "claim+outcome over HTTP vs two bare ninja requests (the two-request floor)",
            ours,
            ">= 0.6",
            lambda r: r >= 0.6,
            baseline=series[TWO_BARE],
            note="bare: two raw INSERT .. ON CONFLICT requests per operation, same gunicorn",
        ),
        Row(
            "claims",
            f"claim batch of {CLAIM_BATCH} vs {CLAIM_BATCH} single claims, per operation",
            series[BATCHES],
            ">= 5",
            lambda r: r >= 5,
            baseline=series[SINGLE_CLAIMS],
        ),
        Row(
            "claims",
            "SQL statements per claim + outcome, in-process (untimed)",
            Series("statements", "per operation", [queries["claim"] + queries["outcome"]]),
            "(shown)",
            None,
            note=f"claim {queries['claim']}, outcome {queries['outcome']}, the token check included",
        ),
    ]
    return [row for row in rows if row.subject.values and (row.baseline is None or row.baseline.values)]


def queries_per_round_trip(token: str, count: int = 20) -> dict[str, float]:
    """SQL statements per claim and per outcome, through Django's test client (no server, untimed):
    what each of the round trip's requests asks of PostgreSQL, the token check included."""
    from django.test import Client

    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    counted = {"claim": 0, "outcome": 0}
    access = logging.getLogger("opsconsole.access")  # a line per request: the servers' logs have them
    level = access.level
    access.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            # Whitenoise's, in-process: no collectstatic here (the servers serve no static file either).
            warnings.filterwarnings("ignore", message="No directory at")
            for n in range(count):
                _count_one(client, invoice(f"queries-{uuid.uuid4().hex[:6]}", n), counted)
    finally:
        access.setLevel(level)
    return {name: total / count for name, total in counted.items()}


def _count_one(client, body: dict, counted: dict[str, int]) -> None:
    import json

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as claim_queries:
        claimed = client.post("/api/v1/claims", data=json.dumps(body), content_type="application/json")
    found = _expect(claimed, 201, "POST /api/v1/claims (test client)")
    report = {"token": found["token"], "outcome": "succeeded", "result": invoice_result(body)}
    with CaptureQueriesContext(connection) as outcome_queries:
        recorded = client.post(
            f"/api/v1/claims/{quote(found['key'], safe=':')}/outcome",
            data=json.dumps(report),
            content_type="application/json",
        )
    _expect(recorded, 200, "outcome (test client)")
    counted["claim"] += len(claim_queries.captured_queries)
    counted["outcome"] += len(outcome_queries.captured_queries)
