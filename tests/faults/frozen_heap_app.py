"""A WSGI application for tests/faults/test_gunicorn_heap.py: served under opsconsole/gunicorn.conf.py
as opsconsole.wsgi is, it answers what the worker's collector holds, as JSON."""

import json

from opsconsole.wsgi import application as opsconsole  # loaded as the worker loads opsconsole's
from tests.faults.heap_probe import counts


def application(environ, start_response):
    if environ.get("PATH_INFO") != "/heap":
        return opsconsole(environ, start_response)
    body = json.dumps(counts()).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
