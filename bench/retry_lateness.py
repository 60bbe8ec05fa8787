"""Benchmark: how late a due retry runs on an idle cluster, with and without delayed nudges.

    DEBUG=1 DATABASE_URL=postgres://postgres@127.0.0.1:5432/opsconsole_bench .venv/bin/python bench/retry_lateness.py

Lateness of one retry = ``started_at`` of the operation's second attempt minus the
``next_attempt_at`` its failed first try scheduled. Each variant:

1. queues one fault per operation at the stand-in destination (``standin``, in this process):
   ``503`` with ``Retry-After: S``, S spread evenly over ``BENCH_MIN_DELAY``..``BENCH_MAX_DELAY``
   seconds (defaults 6..64). The first try of ``file-ticket`` is refused, classified transient and
   retried exactly S seconds later (the jitter ceiling after one try is 4 s, below every S);
2. submits ``BENCH_RETRIES`` (default 30) ``file-ticket`` events in one go; their first tries
   finish within a few seconds, so the cluster is idle when the retries fall due, one every ~2 s;
3. reads every operation's ``next_attempt_at`` while it is ``retrying``, then waits until all
   have succeeded.

Variants, one fresh qcluster each, in this order:

- ``orm / delayed nudge``: the project as built (``ledger.engine.brokers.ORM``);
- ``orm / sweep only``: the baseline, django-q2's plain ORM broker (``bench/plain_broker_settings.py``),
  which has no ``enqueue_at``, so only the one-minute sweep schedule finds a due retry;
- ``redis / delayed nudge``: ``Q_BROKER=redis`` (``ledger.engine.brokers.Redis``), a cluster name of its
  own on ``BENCH_REDIS_URL`` (default ``redis://127.0.0.1:6379/15``); skipped when Redis is down.

Like bench/drain.py it never touches the database in DATABASE_URL: it creates
``bench_retry_<name>`` beside it (PostgreSQL only), migrates it (which creates
the sweep schedule) and drops it at the end. Takes about 4.5 minutes. See bench/README.md.
"""

import logging
import os
import statistics
import sys
import time
import uuid
from contextlib import contextmanager, nullcontext
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
RETRIES = int(os.environ.get("BENCH_RETRIES", "30"))
MIN_DELAY = int(os.environ.get("BENCH_MIN_DELAY", "6"))
MAX_DELAY = int(os.environ.get("BENCH_MAX_DELAY", "64"))
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")
DETAILS = os.environ.get("BENCH_DETAILS", "") not in ("", "0")
# The jitter ceiling after one try of file-ticket: min(cap, base * 2**1) = 4 s. Every Retry-After
# must exceed it, or the retry could be scheduled later than Retry-After (not a problem for the
# measurement, which reads next_attempt_at, but the spread would no longer be the one asked for).
JITTER_CEILING = 4


def main() -> None:
    if MIN_DELAY <= JITTER_CEILING or MAX_DELAY < MIN_DELAY:
        sys.exit(f"need {JITTER_CEILING} < BENCH_MIN_DELAY <= BENCH_MAX_DELAY")
    sys.path.insert(0, str(PROJECT_DIR))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opsconsole.settings")
    from bench.drain import run_on_scratch_database

    run_on_scratch_database(run, prefix="bench_retry")


class Variant:
    def __init__(self, broker: str, name: str, env: dict[str, str], *, redis_cluster: str | None = None):
        self.broker, self.name, self.env, self.redis_cluster = broker, name, env, redis_cluster
        self.lateness: list[float] = []
        self.delayed_nudges = 0
        self.sweeps = []  # when the sweep ran while the variant ran


def variants() -> list[Variant]:
    found = [
        Variant("orm", "delayed nudge", {}),
        Variant(
            "orm",
            "sweep only",
            {
                "DJANGO_SETTINGS_MODULE": "bench.plain_broker_settings",
                "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_DIR), os.environ.get("PYTHONPATH")])),
            },
        ),
    ]
    if redis_reachable():
        name = f"opsconsole-bench-{uuid.uuid4().hex[:8]}"
        found.append(
            Variant(
                "redis",
                "delayed nudge",
                {"Q_BROKER": "redis", "REDIS_URL": REDIS_URL, "Q_CLUSTER_NAME": name},
                redis_cluster=name,
            )
        )
    else:
        print(f"Redis at {REDIS_URL} is not reachable: the redis variant is skipped")
    return found


def redis_reachable() -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping())
    except redis.exceptions.RedisError:
        return False


@contextmanager
def this_process_enqueues_to(variant: Variant):
    """Point this process's django-q2 at the variant's Redis queue while it runs.

    Intake nudges the first tries from this process, through ``get_broker()``, which reads
    django-q2's ``Conf`` (this process was set up with the ORM broker). The cluster name is also
    the salt that signs a task, so a task this process signs must carry the cluster's name.
    """
    from django_q.conf import Conf

    names = ("BROKER_CLASS", "REDIS", "PREFIX", "CLUSTER_NAME")
    saved = {name: getattr(Conf, name) for name in names}
    Conf.BROKER_CLASS, Conf.REDIS = "ledger.engine.brokers.Redis", REDIS_URL
    Conf.PREFIX = Conf.CLUSTER_NAME = variant.redis_cluster
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(Conf, name, value)


def run(log_dir: Path, database_label: str) -> None:
    import django

    django.setup()
    logging.getLogger("django-q").setLevel(logging.WARNING)  # not a line per enqueued task
    from django.core.management import call_command

    from standin import start_in_thread
    from tests.faults.qcluster import cluster_pool

    call_command("migrate", verbosity=0)
    server, _ = start_in_thread()
    delays = spread(RETRIES, MIN_DELAY, MAX_DELAY)
    print(
        f"database: {database_label}; {RETRIES} file-ticket retries per variant, Retry-After "
        f"{MIN_DELAY}..{MAX_DELAY} s; one fresh qcluster (2 workers) per variant"
    )
    measured = []
    try:
        with cluster_pool(log_dir) as start:
            for number, variant in enumerate(variants()):
                began = time.monotonic()
                context = this_process_enqueues_to(variant) if variant.redis_cluster else nullcontext()
                with context:
                    measure(variant, number, start, server, delays)
                measured.append(variant)
                print(f"  {variant.broker} / {variant.name}: done in {time.monotonic() - began:.0f} s")
    finally:
        server.shutdown()
        for variant in measured:
            if variant.redis_cluster:
                forget_redis_keys(variant.redis_cluster)
    report(measured)


def spread(count: int, low: int, high: int) -> list[int]:
    """``count`` whole seconds from ``low`` to ``high``, evenly spaced (Retry-After is an integer)."""
    if count == 1:
        return [low]
    return [round(low + (high - low) * n / (count - 1)) for n in range(count)]


def measure(variant: Variant, number: int, start, server, delays: list[int]) -> None:
    import httpx
    from django.db.models import Count
    from django.utils import timezone
    from django_q.models import OrmQ

    from ledger.core import accounts
    from ledger.intake import submit
    from ledger.models import Attempt, Heartbeat, Operation
    from ledger.states import State
    from tests.faults.qcluster import ClusterError, operation_states, wait_for

    workspace, _ = accounts.create_workspace(slug=f"bench-retry-{number}", approved_owners=["ops"], actor="bench")
    # The sweep leaves a heartbeat (the time it ran); the waits below note each one they see.
    beats = set(Heartbeat.objects.filter(name="sweep").values_list("beat_at", flat=True))
    seen_before = set(beats)
    cluster = start(f"retry-{number}", env={"OPSCONSOLE_STANDIN_URL": server.base_url, **variant.env})
    with httpx.Client(base_url=server.base_url, timeout=5) as standin:
        standin.post("/_reset").raise_for_status()
        standin.post(
            "/_faults",
            json={"faults": [{"kind": "status", "status": 503, "retry_after": seconds} for seconds in delays]},
        ).raise_for_status()
        events = [
            {
                "action": "file-ticket",
                "delivery_id": f"retry-{number}-{n}-d1",
                "data": {"request_id": f"retry-{number}-{n}", "version": 1, "summary": f"Ticket {n}", "owner": "ops"},
            }
            for n in range(len(delays))
        ]
        results = submit.submit_batch(workspace=workspace, raw_events=events, source="cli")
        if {result.outcome for result in results} != {"accepted"}:
            raise ClusterError(f"intake did not accept every event: {[r.outcome for r in results]}")
        ids = [result.operation.pk for result in results]

        def states():
            beats.update(Heartbeat.objects.filter(name="sweep").values_list("beat_at", flat=True))
            return operation_states(ids)

        # Every first try refused: each operation waits in `retrying` for its own due time.
        wait_for(
            lambda: states().get(State.RETRYING) == len(ids),
            timeout=60,
            clusters=(cluster,),
            interval=0.05,
            describe=lambda: str(operation_states(ids)),
            message="the first tries did not all end in a scheduled retry",
        )
        due = dict(Operation.objects.filter(pk__in=ids, state=State.RETRYING).values_list("pk", "next_attempt_at"))
        if len(due) != len(ids):
            raise ClusterError(
                f"a retry ran before its due time was read ({len(due)} of {len(ids)} still due); raise BENCH_MIN_DELAY"
            )
        left = standin.get("/_faults").json()["faults"]
        if left:
            raise ClusterError(f"{len(left)} injected faults were not consumed by the first tries")

    # The delayed nudges now waiting in the broker (none when it cannot wait).
    if variant.redis_cluster:
        import redis

        variant.delayed_nudges = redis.Redis.from_url(REDIS_URL).zcard(f"django_q:{variant.redis_cluster}:q:delayed")
    else:
        variant.delayed_nudges = OrmQ.objects.filter(lock__in=list(due.values())).count()

    latest = max(due.values())
    wait_for(
        lambda: states().get(State.SUCCEEDED) == len(ids),
        timeout=(latest - timezone.now()).total_seconds() + 180,
        clusters=(cluster,),
        describe=lambda: str(operation_states(ids)),
        message="the retries did not all succeed",
    )
    cluster.stop()
    variant.sweeps = sorted(beats - seen_before)

    tries = dict(Attempt.objects.filter(operation__in=ids).order_by().values_list("operation").annotate(n=Count("id")))
    if set(tries.values()) != {2}:
        raise ClusterError(f"expected exactly two attempts per operation, found {sorted(set(tries.values()))}")
    retried = dict(Attempt.objects.filter(operation__in=ids, number=2).values_list("operation", "started_at"))
    variant.lateness = [(retried[pk] - due[pk]).total_seconds() for pk in ids]
    if DETAILS:
        first = dict(Attempt.objects.filter(operation__in=ids, number=1).values_list("operation", "finished_at"))
        for pk in sorted(ids, key=due.get):
            print(
                f"    op {pk}: due {due[pk]:%H:%M:%S.%f} (+{(due[pk] - first[pk]).total_seconds():5.1f} s), "
                f"retry began {retried[pk]:%H:%M:%S.%f}, late {(retried[pk] - due[pk]).total_seconds():7.3f} s"
            )
        print(f"    sweeps ran at {', '.join(f'{beat:%H:%M:%S.%f}' for beat in variant.sweeps) or 'no time seen'}")


def forget_redis_keys(cluster_name: str) -> None:
    import redis

    connection = redis.Redis.from_url(REDIS_URL)
    keys = list(connection.scan_iter(match=f"django_q:{cluster_name}:*"))
    if keys:
        connection.delete(*keys)


def percentile(values: list[float], fraction: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    below = int(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def report(measured: list[Variant]) -> None:
    print()
    print(
        f"{'broker':<7} {'variant':<14} {'n':>3} {'p50 s':>7} {'p95 s':>7} {'max s':>7} {'min s':>7} "
        f"{'delayed nudges':>15} {'sweeps':>6}"
    )
    for variant in measured:
        values = variant.lateness
        print(
            f"{variant.broker:<7} {variant.name:<14} {len(values):>3} {statistics.median(values):7.2f} "
            f"{percentile(values, 0.95):7.2f} {max(values):7.2f} {min(values):7.2f} "
            f"{variant.delayed_nudges:>15} {len(variant.sweeps):>6}"
        )
    by_name = {(variant.broker, variant.name): variant for variant in measured}
    baseline = by_name.get(("orm", "sweep only"))
    for broker in ("orm", "redis"):
        delayed = by_name.get((broker, "delayed nudge"))
        if baseline and delayed:
            ratio = percentile(baseline.lateness, 0.95) / percentile(delayed.lateness, 0.95)
            print(f"p95 lateness, baseline (orm, sweep only) / {broker} delayed nudge: {ratio:.0f}x")


if __name__ == "__main__":
    main()
