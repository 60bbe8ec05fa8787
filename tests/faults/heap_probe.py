"""What a worker's collector holds, for the tests of the frozen heap: ``counts`` answered by a
gunicorn worker (tests/faults/frozen_heap_app.py), ``write_heap`` a task a cluster worker runs
(tests/faults/test_cluster_worker_heap.py; the cluster keeps no successful task's result)."""

import gc
import json
import os
from pathlib import Path


def counts() -> dict[str, int]:
    """The objects frozen (the permanent generation) and those the collector still tracks."""
    return {"frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects())}


def write_heap(path: str) -> None:
    # Written whole, then renamed: the test, polling for the file, never reads half of it.
    partial = Path(f"{path}.partial")
    partial.write_text(json.dumps(counts()))
    os.replace(partial, path)
