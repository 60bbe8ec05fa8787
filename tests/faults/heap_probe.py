"""A task for tests/faults/test_cluster_worker_heap.py: run by a cluster worker, it writes what the
worker's collector holds to a file (the cluster keeps no successful task's result)."""

import gc
import json
import os
from pathlib import Path


def write_heap(path: str) -> None:
    # Written whole, then renamed: the test, polling for the file, never reads half of it.
    partial = Path(f"{path}.partial")
    partial.write_text(json.dumps({"frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects())}))
    os.replace(partial, path)
