"""gunicorn for `make serve`: ``gunicorn -c opsconsole/gunicorn.conf.py opsconsole.wsgi``.

Sync workers, meant to sit behind a proxy that terminates TLS and buffers slow clients
(docs/operations.md). Each worker is one single-threaded process serving one request at a time,
so it keeps exactly one database connection (CONN_MAX_AGE): the web server never holds more than
``workers`` connections. The API is CPU-bound Python, so 2 x cores + 1 workers keep the cores busy
while some wait on the database (capped at 9, so that a server stays well inside PostgreSQL's
connection limit); threads measured no faster on 2 cores and hold more connections.
"""

import os

bind = os.environ.get("BIND", "127.0.0.1:8000").split(",")
workers = int(os.environ.get("WEB_CONCURRENCY", min(2 * (os.cpu_count() or 1) + 1, 9)))
worker_class = "sync"
# Not used (gunicornc), and its default path is one per user: two servers on a host would share it.
control_socket_disable = True
