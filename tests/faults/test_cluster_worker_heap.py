"""A cluster worker freezes what it loaded as it starts (ledger/engine/cluster_workers.py, django-q2's
``post_spawn``), as a gunicorn worker does (tests/faults/test_gunicorn_heap.py).

A real qcluster: a task (tests/faults/heap_probe.py) run by one of its workers writes the worker's
collector counts to a file.
"""

import json

import pytest
from django_q.tasks import async_task

from tests.faults.qcluster import wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def test_a_cluster_worker_freezes_what_it_loaded(start_cluster, tmp_path):
    cluster = start_cluster("heap")
    written = tmp_path / "heap.json"

    async_task("tests.faults.heap_probe.write_heap", str(written))

    wait_for(written.exists, timeout=30, clusters=(cluster,), message="no worker ran the heap probe")
    heap = json.loads(written.read_text())
    # Django and the apps are in the permanent generation; what the collector still tracks is what
    # the worker made since (the task's modules among it).
    assert heap["frozen"] > 50_000, heap
    assert heap["tracked"] < heap["frozen"], heap
