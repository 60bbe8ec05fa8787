"""Scenarios 1 and 2 of ``make bench``: intake of one event in-process, and batches over HTTP.

Both go through the public entry points only (``ledger.intake.submit.submit_event``, ``POST /api/v1/events``
and ``POST /api/v1/events/batch`` of a real gunicorn), so they keep measuring whatever intake becomes.

1. In-process, one event at a time (each ``submit_event`` call is its own transaction, as the API's):
   new events and duplicates (the same envelopes again), against
   - raw psycopg, autocommit ``INSERT .. ON CONFLICT DO NOTHING`` of an operation-shaped row (a copy
     of a real operation row, with a new key, into ``bench_raw_operation``, created ``LIKE
     ledger_operation INCLUDING ALL``: the same columns, defaults, checks and indexes), and
   - AWS Lambda Powertools ``idempotent_function`` on Redis (``CachePersistenceLayer``), new keys and
     repeated keys: the idempotency layer people reach for (no payload check, no audit, no ledger).
   Untimed, on the side: dead tuples per new and per duplicate event (``n_dead_tup`` deltas over every
   table of the scratch database, read after the writer's backend has exited, which flushes its
   statistics; autovacuum is off here), and queue rows (``django_q_ormq``) created per event: the
   nudges, with no cluster running to consume them.
2. Over HTTP, gunicorn as ``make serve`` runs it, one client: batches of 500 (``BENCH_BATCHES``, 8
   POSTs one after another per measurement) per event,
   against single POSTs one after another on one ``httpx.Client``, and against the Powertools peer
   behind the same gunicorn configuration with the same endpoint shape (bench/powertools_server.py,
   ``POST /powertools/events/batch``: ``idempotent_function`` per event, new keys, on
   ``BENCH_REDIS_URL``). Every body is JSON-encoded before its clock starts.
"""

from __future__ import annotations

import os
import time
import uuid
import warnings
from pathlib import Path

from bench.harness import Rounds, Row, Series, env_int, rate, timed_calls

RAW_COUNT = env_int("BENCH_RAW_COUNT", 3000)
INTAKE_COUNT = env_int("BENCH_INTAKE_COUNT", 600)
PEER_COUNT = env_int("BENCH_PEER_COUNT", 2000)
DEAD_TUPLE_COUNT = env_int("BENCH_DEAD_TUPLE_COUNT", 200)
SINGLE_COUNT = env_int("BENCH_SINGLE_COUNT", 300)
BATCH_SIZE = env_int("BENCH_BATCH_SIZE", 500)
# Batches per measurement, one after another (one is ~0.15-0.25 s): 3 made a measurement ~0.5 s, and
# the rounds of one run spread 0.61-1.61 against Powertools (2026-12-06); 8 narrow it.
BATCHES = env_int("BENCH_BATCHES", 8)
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")
RAW_TABLE = "bench_raw_operation"


def event(tag: str, n: int) -> dict:
    """A prepare-brief envelope, distinct per (tag, n)."""
    return {
        "action": "prepare-brief",
        "delivery_id": f"{tag}-{n}-d1",
        "data": {"request_id": f"{tag}-{n}", "version": 1, "title": f"Brief {n}", "owner": "ops"},
    }


def raw_connection():
    import psycopg

    from tests.faults.qcluster import database_url

    return psycopg.connect(database_url(), autocommit=True)


# --- the baseline: one raw INSERT .. ON CONFLICT DO NOTHING per row -----------------------------------


class RawInsert:
    """Autocommit single-row inserts of operation-shaped rows into a scratch copy of the table."""

    def __init__(self, connection, template_operation_id: int):
        from psycopg import sql

        from ledger.models import Operation

        self.connection = connection
        table = Operation._meta.db_table
        connection.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(RAW_TABLE)))
        connection.execute(
            sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(sql.Identifier(RAW_TABLE), sql.Identifier(table))
        )
        cursor = connection.execute(
            sql.SQL("SELECT * FROM {} WHERE id = %s").format(sql.Identifier(table)), [template_operation_id]
        )
        values = cursor.fetchone()
        columns = [column.name for column in cursor.description]
        # Whatever the table holds, the template is a real row; what must be unique is made unique.
        unique = {
            name
            for (name,) in connection.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a "
                "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
                "WHERE i.indrelid = %s::regclass AND i.indisunique",
                [RAW_TABLE],
            ).fetchall()
        }
        self.template = {name: value for name, value in zip(columns, values, strict=True) if name != "id"}
        self.varied = sorted(unique - {"id", "workspace_id"})
        self.statement = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT DO NOTHING").format(
            sql.Identifier(RAW_TABLE),
            sql.SQL(", ").join(map(sql.Identifier, self.template)),
            sql.SQL(", ").join(sql.Placeholder() * len(self.template)),
        )
        self.next = 0

    def rows(self, count: int) -> list[tuple]:
        from psycopg.types.json import Jsonb

        made = []
        for _ in range(count):
            self.next += 1
            row = dict(self.template)
            for name in self.varied:
                value = row[name]
                row[name] = f"raw-{self.next}:{value}" if isinstance(value, str) else 10**12 + self.next
            made.append(tuple(Jsonb(v) if isinstance(v, dict | list) else v for v in row.values()))
        return made

    def measure(self, count: int) -> float:
        rows = self.rows(count)
        cursor = self.connection.cursor()
        inserted = []

        def insert(row):
            cursor.execute(self.statement, row)
            inserted.append(cursor.rowcount)

        done, took = timed_calls(rows, insert)
        if sum(inserted) != done:
            raise RuntimeError(f"raw baseline inserted {sum(inserted)} of {done} rows (a unique column not varied?)")
        return rate(done, took)


# --- the peer: Powertools idempotent_function on Redis -------------------------------------------


class PowertoolsPeer:
    def __init__(self):
        import redis
        from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
        from aws_lambda_powertools.utilities.idempotency.persistence.cache import CachePersistenceLayer

        warnings.filterwarnings("ignore", message=".*remaining time.*")  # no Lambda context here
        self.prefix = f"opsconsole-bench-{uuid.uuid4().hex[:8]}"
        self.client = redis.Redis.from_url(REDIS_URL)
        self.client.ping()
        layer = CachePersistenceLayer(client=self.client)
        config = IdempotencyConfig(event_key_jmespath="[action, data.request_id, data.version]")

        @idempotent_function(
            data_keyword_argument="event", persistence_store=layer, config=config, key_prefix=self.prefix
        )
        def handle(event: dict) -> dict:
            return {"status": "accepted", "request_id": event["data"]["request_id"]}

        self.handle = handle
        self.round = 0

    def measure(self, count: int) -> tuple[float, float]:
        """New keys, then the same keys again: (new/s, duplicates/s)."""
        self.round += 1
        events = [event(f"pt{self.round}", n) for n in range(count)]
        done, took = timed_calls(events, lambda body: self.handle(event=body))
        new = rate(done, took)
        return new, rate(*timed_calls(events[:done], lambda body: self.handle(event=body)))

    def forget(self) -> None:
        keys = list(self.client.scan_iter(match=f"{self.prefix}*"))
        if keys:
            self.client.delete(*keys)
        self.client.close()


# --- dead tuples and queue rows per event ----------------------------------------------------------


def _flush_statistics(observer) -> None:
    """End this process's database session: its backend flushes its table statistics as it exits
    (PostgreSQL 15 otherwise sends them at most once a second, up to 10 s late when idle)."""
    from django.db import connection

    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    connection.close()
    deadline = time.monotonic() + 30
    while observer.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
        if time.monotonic() > deadline:
            raise RuntimeError("the benchmark's database session did not end")
        time.sleep(0.02)


def _table_counters(observer) -> dict[str, int]:
    observer.execute("SELECT pg_stat_clear_snapshot()")
    return {
        name: dead
        for name, dead in observer.execute(
            "SELECT relname, n_dead_tup FROM pg_stat_user_tables WHERE relname <> %s", [RAW_TABLE]
        ).fetchall()
    }


def _queue_rows(observer) -> int:
    from django_q.models import OrmQ

    return observer.execute(f'SELECT count(*) FROM "{OrmQ._meta.db_table}"').fetchone()[0]


def side_effects_per_event(workspace, observer, count: int) -> dict:
    """Dead tuples and queue rows per new and per duplicate event (no cluster running)."""
    from ledger.intake import submit

    events = [event("dead", n) for n in range(count)]
    found = {}
    for kind, expected in (("new", "accepted"), ("duplicate", "duplicate")):
        _flush_statistics(observer)
        dead_before, queue_before = _table_counters(observer), _queue_rows(observer)
        outcomes = {submit.submit_event(workspace=workspace, raw=body, source="cli").outcome for body in events}
        if outcomes != {expected}:
            raise RuntimeError(f"{kind} events were answered {outcomes}")
        _flush_statistics(observer)
        dead_after, queue_after = _table_counters(observer), _queue_rows(observer)
        by_table = {name: dead_after[name] - dead_before.get(name, 0) for name in dead_after}
        found[kind] = {
            "dead_per_event": sum(by_table.values()) / count,
            "dead_by_table": {name: delta for name, delta in sorted(by_table.items()) if delta},
            "queue_rows_per_event": (queue_after - queue_before) / count,
        }
    return found


# --- scenario 1 -----------------------------------------------------------------------------------


def scenario_intake(rounds: Rounds) -> list[Row]:
    from django.db import connection

    from ledger.core import accounts
    from ledger.intake import submit
    from ledger.models import Operation

    workspace, _ = accounts.create_workspace(slug="bench-intake", approved_owners=["ops"], actor="bench")
    raw_conn, observer = raw_connection(), raw_connection()
    peer = PowertoolsPeer()
    try:
        for _ in range(2):  # new events, then the same as duplicates
            for n in range(50):
                submit.submit_event(workspace=workspace, raw=event("warm", n), source="cli")
        template = Operation.objects.filter(workspace=workspace).values_list("pk", flat=True).first()
        raw = RawInsert(raw_conn, template)
        raw.measure(200)
        peer.measure(200)

        side = side_effects_per_event(workspace, observer, DEAD_TUPLE_COUNT)
        connection.ensure_connection()

        series = {
            name: Series(name, unit)
            for name, unit in (
                ("raw INSERT", "rows/s"),
                ("intake new", "events/s"),
                ("intake duplicate", "events/s"),
                ("Powertools new", "events/s"),
                ("Powertools duplicate", "events/s"),
            )
        }
        state = {"round": 0}

        def intake_new_and_duplicates():
            state["round"] += 1
            events = [event(f"in{state['round']}", n) for n in range(INTAKE_COUNT)]
            for kind, expected in (("intake new", "accepted"), ("intake duplicate", "duplicate")):
                outcomes = set()

                def submit_one(body, outcomes=outcomes):
                    outcomes.add(submit.submit_event(workspace=workspace, raw=body, source="cli").outcome)

                done, took = timed_calls(events, submit_one)
                series[kind].values.append(rate(done, took))
                if outcomes != {expected}:
                    raise RuntimeError(f"{kind}: answered {outcomes}")
                events = events[:done]  # the duplicates: what was submitted new

        def powertools():
            new, duplicate = peer.measure(PEER_COUNT)
            series["Powertools new"].values.append(new)
            series["Powertools duplicate"].values.append(duplicate)

        rounds.run(
            [
                ("raw INSERT", lambda: series["raw INSERT"].values.append(raw.measure(RAW_COUNT))),
                ("intake new+duplicates", intake_new_and_duplicates),
                ("Powertools new+duplicates", powertools),
            ],
            label="1 intake",
        )
    finally:
        peer.forget()
        raw_conn.close()
        observer.close()

    def value(name, unit, number):
        return Series(name, unit, [number])

    new_side, dup_side = side["new"], side["duplicate"]
    return [
        Row(
            "1",
            "intake new event, in-process",
            series["intake new"],
            ">= 0.5",
            lambda r: r >= 0.5,
            baseline=series["raw INSERT"],
        ),
        Row("1", "intake duplicate, in-process", series["intake duplicate"], "-", None, baseline=series["raw INSERT"]),
        Row(
            "1",
            "intake duplicate vs new",
            series["intake duplicate"],
            "> 1",
            lambda r: r > 1,
            baseline=series["intake new"],
        ),
        Row(
            "1",
            "dead tuples per new event",
            value("dead tuples", "per event", new_side["dead_per_event"]),
            "0",
            lambda v: v == 0,
            note=f"by table: {new_side['dead_by_table'] or 'none'}",
        ),
        Row(
            "1",
            "dead tuples per duplicate",
            value("dead tuples", "per event", dup_side["dead_per_event"]),
            "0",
            lambda v: v == 0,
            note=f"by table: {dup_side['dead_by_table'] or 'none'}",
        ),
        Row("1", "intake new vs Powertools new", series["intake new"], "-", None, baseline=series["Powertools new"]),
        Row(
            "1",
            "intake duplicate vs Powertools duplicate",
            series["intake duplicate"],
            "-",
            None,
            baseline=series["Powertools duplicate"],
        ),
        Row(
            "3",
            "queue rows per new event, no cluster",
            value("queue rows", "per event", new_side["queue_rows_per_event"]),
            "<= 0.02",
            lambda v: v <= 0.02,
            note="django_q_ormq rows created by ledger.intake.submit.submit_event; 0.02 = one per claim batch of 50",
        ),
        Row(
            "3",
            "queue rows per duplicate, no cluster",
            value("queue rows", "per event", dup_side["queue_rows_per_event"]),
            "0",
            lambda v: v == 0,
        ),
    ]


# --- scenario 2 -----------------------------------------------------------------------------------


def scenario_batches(rounds: Rounds, log_dir: Path) -> list[Row]:
    import json

    import httpx

    from bench.scenario_claims import forget_keys, redis_durability
    from ledger.core import accounts
    from tests.faults.gunicorn import configured_workers, running_gunicorn

    workspace, token = accounts.create_workspace(slug="bench-http", approved_owners=["ops"], actor="bench")
    prefix = f"opsconsole-bench-batch-{uuid.uuid4().hex[:8]}"
    batch_name = f"batch of {BATCH_SIZE}"
    peer_name = f"Powertools, batch of {BATCH_SIZE}"
    series = {
        name: Series(name, unit)
        for name, unit in (("single POSTs", "events/s"), (batch_name, "events/s"), (peer_name, "events/s"))
    }
    state = {"single": 0, "batch": 0, "peer": 0}
    closed = set()
    json_headers = {"Content-Type": "application/json"}

    def encoded(body) -> bytes:
        # Bodies are encoded before the clock starts, for ours and the peer alike.
        return json.dumps(body).encode()

    try:
        with (
            running_gunicorn(log_dir) as server,
            running_gunicorn(
                log_dir,
                app="bench.powertools_server:app",
                ready_path="/health",
                env={"POWERTOOLS_REDIS_URL": REDIS_URL, "POWERTOOLS_KEY_PREFIX": prefix},
            ) as peer_server,
            httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=120) as http,
            httpx.Client(base_url=peer_server.url, timeout=120) as peer_http,
        ):
            print(
                f"  gunicorn: {configured_workers()} sync workers on {server.url} (ours), {peer_server.url} "
                f"(Powertools; Redis {redis_durability(REDIS_URL)})",
                flush=True,
            )

            def post(body: bytes) -> None:
                answer = http.post("/api/v1/events", content=body, headers=json_headers)
                if answer.status_code != 201:
                    raise RuntimeError(f"POST /api/v1/events answered {answer.status_code}: {answer.text[:300]}")
                closed.add(answer.headers.get("connection", "(none)"))

            def single(tag: str, count: int) -> float:
                return rate(*timed_calls([encoded(event(tag, n)) for n in range(count)], post))

            def batch(client, path: str, tag: str, count: int, batches: int = 1) -> float:
                """``batches`` POSTs of ``count`` events, one after another: events per second over them."""
                bodies = [
                    encoded({"events": [event(f"{tag}-{number}", n) for n in range(count)]})
                    for number in range(batches)
                ]
                answers = []
                started = time.perf_counter()
                for body in bodies:
                    answers.append(client.post(path, content=body, headers=json_headers))
                took = time.perf_counter() - started
                for answer in answers:
                    if answer.status_code != 200:
                        raise RuntimeError(f"POST {path} answered {answer.status_code}: {answer.text[:300]}")
                    statuses = {item["http_status"] for item in answer.json()["results"]}
                    if statuses != {201}:
                        raise RuntimeError(f"{path}: batch items answered {statuses}")
                return rate(count * batches, took)

            single("warm-single", 30)  # every worker has answered once
            for n in range(10):
                batch(http, "/api/v1/events/batch", f"warm-batch{n}", 50)
                batch(peer_http, "/powertools/events/batch", f"warm-peer{n}", 50)
            # Then full batches, one per worker (batches of 50 alone left the first round's of 500
            # at 0.86-1.04 of Powertools where the later rounds ran 1.2-1.7, in either checkout).
            for worker in range(configured_workers()):
                batch(http, "/api/v1/events/batch", f"warm-full{worker}", BATCH_SIZE)
                batch(peer_http, "/powertools/events/batch", f"warm-peer-full{worker}", BATCH_SIZE)

            def run_single():
                state["single"] += 1
                series["single POSTs"].values.append(single(f"single{state['single']}", SINGLE_COUNT))

            def run_batch():
                state["batch"] += 1
                series[batch_name].values.append(
                    batch(http, "/api/v1/events/batch", f"batch{state['batch']}", BATCH_SIZE, BATCHES)
                )

            def run_peer():
                state["peer"] += 1
                series[peer_name].values.append(
                    batch(peer_http, "/powertools/events/batch", f"peer{state['peer']}", BATCH_SIZE, BATCHES)
                )

            rounds.run(
                [("single POSTs", run_single), ("batch", run_batch), ("Powertools batch", run_peer)],
                label="2 batches",
            )
    finally:
        forget_keys(REDIS_URL, prefix)
    note = f"Connection header of the single answers: {', '.join(sorted(closed))}"
    return [
        Row(
            "2",
            f"batch of {BATCH_SIZE} over HTTP, per event",
            series[batch_name],
            ">= 10",
            lambda r: r >= 10,
            baseline=series["single POSTs"],
            note=note,
        ),
        Row(
            "2",
            f"batch of {BATCH_SIZE} over HTTP vs Powertools behind the same gunicorn, per event",
            series[batch_name],
            ">= 1.25",
            lambda r: r >= 1.25,
            baseline=series[peer_name],
            note="bench/powertools_server.py, POST /powertools/events/batch: idempotent_function per event on "
            "the machine's Redis; bodies encoded before the clock for both",
        ),
    ]
