"""With the Redis broker a killed worker's task is simply lost (at most once); the ledger's sweep
re-drives the operations it held, and each is still performed exactly once.

Real processes: qclusters on the Redis broker against the PostgreSQL test database, and the sweep
run as ``manage.py sweep`` with the same settings, so its nudges go to Redis too.
"""

import subprocess
import sys
import uuid

import pytest
from django.utils import timezone
from django_q.models import Schedule

from ledger.models import Operation
from ledger.states import State
from tests.faults.qcluster import (
    PROJECT_DIR,
    QCluster,
    assert_each_performed_exactly_once,
    cluster_pool,
    operation_states,
    submit_prepare_briefs,
    wait_for,
    wait_for_other_sessions_to_end,
)

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

OPERATIONS = 30
LEASE_SECONDS = 2


def requires_redis(url: str):
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.exceptions.RedisError as exc:
        pytest.skip(f"needs Redis at {url} ({exc})")


@pytest.fixture
def redis_env(tmp_path):
    url = "redis://127.0.0.1:6379/15"
    requires_redis(url)
    # A cluster name of its own: django-q2 keys its Redis queue by it, so no other run interferes.
    return {
        "Q_BROKER": "redis",
        "REDIS_URL": url,
        "Q_CLUSTER_NAME": f"opsconsole-test-{uuid.uuid4().hex[:8]}",
        "OPSCONSOLE_LEASE_SECONDS": str(LEASE_SECONDS),
    }


def run_sweep(env, log_dir):
    """``manage.py sweep`` in a process of its own, with the clusters' settings (Redis broker)."""
    command_env = QCluster(name="sweep", log_dir=log_dir, env=env).env
    result = subprocess.run(
        [sys.executable, "manage.py", "sweep"],
        cwd=PROJECT_DIR,
        env=command_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_it_re_drives_what_a_lost_redis_task_left_behind(workspace, redis_env, tmp_path):
    # The schedule would run the sweep on its own minute; this test runs it when it chooses.
    Schedule.objects.all().delete()
    operation_ids = submit_prepare_briefs(workspace, OPERATIONS)  # nudges go to this process's ORM queue
    marker = tmp_path / "crashed"
    with cluster_pool(tmp_path, env=redis_env) as start:
        crashing = start(
            "crashing",
            env=redis_env | {"OPSCONSOLE_CRASH_AT": "after_claim", "OPSCONSOLE_CRASH_ONCE_FILE": str(marker)},
        )
        run_sweep(redis_env, tmp_path)  # the only nudges on Redis
        wait_for(marker.exists, timeout=30, clusters=(crashing,), message="no worker reached the crash point")
        crashing.kill()
        wait_for_other_sessions_to_end()
        stranded = list(Operation.objects.filter(state=State.PROCESSING).values_list("pk", flat=True))
        assert stranded, "the crash left no claimed operation behind"

        restarted = start("restarted", env=redis_env)
        lease_ends = max(Operation.objects.filter(pk__in=stranded).values_list("lease_expires_at", flat=True))
        wait_for(lambda: timezone.now() > lease_ends, timeout=LEASE_SECONDS + 5, message="the lease did not end")
        # Redis delivered the claiming task once and lost it with the worker, and a claim takes
        # only pending or retrying work: until the sweep runs, nothing takes the stranded ones back.
        assert Operation.objects.filter(pk__in=stranded, state=State.PROCESSING).count() == len(stranded)

        report = run_sweep(redis_env, tmp_path)

        assert f'"leases_expired": {len(stranded)}' in report
        wait_for(
            lambda: operation_states(operation_ids) == {"succeeded": OPERATIONS},
            timeout=60,
            clusters=(restarted,),
            describe=lambda: f"states {operation_states(operation_ids)}",
            message="the sweep's nudges did not drain the stranded operations",
        )
    assert_each_performed_exactly_once(operation_ids)
