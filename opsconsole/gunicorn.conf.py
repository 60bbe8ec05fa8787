"""gunicorn for `make serve`: ``gunicorn -c opsconsole/gunicorn.conf.py opsconsole.wsgi``.

Sync workers, meant to sit behind a proxy that terminates TLS and buffers slow clients
(docs/operations.md). Each worker is one single-threaded process serving one request at a time,
so it keeps exactly one database connection (CONN_MAX_AGE): the web server never holds more than
``workers`` connections. The API is CPU-bound Python, so 2 x cores + 1 workers keep the cores busy
while some wait on the database (capped at 9, so that a server stays well inside PostgreSQL's
connection limit); threads measured no faster on 2 cores and hold more connections.
"""

import gc
import os
import shutil
import tempfile

bind = os.environ.get("BIND", "127.0.0.1:8000").split(",")
workers = int(os.environ.get("WEB_CONCURRENCY", min(2 * (os.cpu_count() or 1) + 1, 9)))
worker_class = "sync"
# Not used (gunicornc), and its default path is one per user: two servers on a host would share it.
control_socket_disable = True


def post_worker_init(worker):
    # The application is loaded (opsconsole/wsgi.py imports every route): what is alive now lives as
    # long as the worker. Frozen, the collector's full passes no longer walk it: ~140,000 objects,
    # one pass of ~70 ms every ~1,000 requests, ~5 % of a request's CPU (docs/performance.md).
    # Loaded by the master before the fork (--preload), the objects' pages are shared with it until
    # written: a collection here would write every one of them, so they are frozen as inherited.
    if not worker.cfg.preload_app:
        gc.collect()
    gc.freeze()


# The request metrics (opsconsole.requests_metrics): each worker counts in files of its own in a
# directory made for this run, so counts of an earlier run never leak in; /metrics sums them. Made
# before the workers fork (they import prometheus-client after, and read the variable then), removed
# when the server stops. TMPDIR chooses where (a container with a read-only root: a tmpfs).
_metrics_dir = ""


def on_starting(server):
    global _metrics_dir
    _metrics_dir = tempfile.mkdtemp(prefix="opsconsole-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = _metrics_dir


def child_exit(server, worker):
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def on_exit(server):
    shutil.rmtree(_metrics_dir, ignore_errors=True)
