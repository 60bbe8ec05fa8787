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

The target: at least the rate of ``idempotent_function`` with the same durability (ratio
>= 1); the others are shown. ``BENCH_CLAIMS_COUNT`` (300) operations per measurement at most, within
``BENCH_SECONDS``.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
import warnings
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from bench.harness import Rounds, Row, Series, env_int, rate, timed_calls

CLAIMS_COUNT = env_int("BENCH_CLAIMS_COUNT", 300)
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")
OURS = "opsconsole claim+outcome"


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
    from django.conf import settings

    from ledger.core import accounts
    from tests.configured import apply_send_invoice
    from tests.faults.gunicorn import configured_workers, running_gunicorn

    _workspace, token = accounts.create_workspace(slug="bench-claims", approved_owners=["ops"], actor="bench")
    # The demo's send-invoice, from its integrations file (the caller's effect is nothing here, so
    # its destination, only asked after an expired lease, is never called).
    apply_send_invoice(settings.OPSCONSOLE_STANDIN_URL)
    prefix = f"opsconsole-bench-claims-{uuid.uuid4().hex[:8]}"
    redis_urls = {"Redis, no persistence": REDIS_URL}
    with durable_redis(log_dir) as aof_url:
        redis_urls["Redis AOF fsync always"] = aof_url
        durability = {name: redis_durability(url) for name, url in redis_urls.items()}
        durability["PostgreSQL"] = postgres_durability()
        print(f"  gunicorn: {configured_workers()} sync workers per server, one client, one operation at a time")
        for name, text in durability.items():
            print(f"  durability, {name}: {text}", flush=True)
        try:
            with (
                running_gunicorn(log_dir) as ours_server,
                running_gunicorn(
                    log_dir,
                    app="bench.powertools_server:app",
                    ready_path="/health",
                    env={"POWERTOOLS_REDIS_URL": REDIS_URL, "POWERTOOLS_KEY_PREFIX": prefix},
                ) as volatile_server,
                running_gunicorn(
                    log_dir,
                    app="bench.powertools_server:app",
                    ready_path="/health",
                    env={"POWERTOOLS_REDIS_URL": aof_url, "POWERTOOLS_KEY_PREFIX": prefix},
                ) as durable_server,
                httpx.Client(
                    base_url=ours_server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
                ) as ours_http,
                httpx.Client(base_url=volatile_server.url, timeout=60) as volatile_http,
                httpx.Client(base_url=durable_server.url, timeout=60) as durable_http,
            ):
                subjects = {
                    OURS: (ours_http, ours_round_trip),
                    "idempotent_function, Redis no persistence": (volatile_http, powertools_function),
                    "idempotent_function, Redis AOF always": (durable_http, powertools_function),
                    "split, Redis no persistence": (volatile_http, powertools_split),
                    "split, Redis AOF always": (durable_http, powertools_split),
                }
                series = {name: Series(name, "operations/s") for name in subjects}
                for number, (http, call) in enumerate(subjects.values()):
                    measure(http, call, f"warm{number}", 30)  # every worker has answered once

                def step(name: str):
                    http, call = subjects[name]

                    def run():
                        tag = f"r{len(series[name].values)}-{uuid.uuid4().hex[:6]}"
                        series[name].values.append(measure(http, call, tag, CLAIMS_COUNT))

                    return name, run

                rounds.run([step(name) for name in subjects], label="claims")
        finally:
            for url in redis_urls.values():
                forget_keys(url, prefix)

    ours = series[OURS]
    note = (
        "durability: opsconsole a PostgreSQL commit (fsync on, synchronous_commit on) per request; "
        "Powertools on Redis with appendfsync always (its AOF fsynced per write)"
    )
    queries = queries_per_round_trip(token)
    return [
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
            "SQL statements per claim + outcome, in-process (untimed)",
            Series("statements", "per operation", [queries["claim"] + queries["outcome"]]),
            "(shown)",
            None,
            note=f"claim {queries['claim']}, outcome {queries['outcome']}, the token check included",
        ),
    ]


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
