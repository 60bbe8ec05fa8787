"""Only a worker the cluster spawned freezes what it loaded (ledger/engine/cluster_workers.py): a task
run synchronously goes through django-q2's worker loop, and its ``post_spawn``, in the caller's own
process, which must not freeze (tests/faults/test_cluster_worker_heap.py has the spawned worker)."""

import gc
import json

import pytest
from django_q.tasks import async_task

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_task_run_in_the_callers_process_freezes_nothing(sync_queue, tmp_path):
    written = tmp_path / "heap.json"
    frozen_before = gc.get_freeze_count()

    async_task("tests.faults.heap_probe.write_heap", str(written))

    assert written.exists()  # the task ran, here, through the worker loop
    assert json.loads(written.read_text())["frozen"] == frozen_before
    assert gc.get_freeze_count() == frozen_before
