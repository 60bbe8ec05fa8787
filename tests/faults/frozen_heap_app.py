"""A WSGI application for tests/faults/test_gunicorn_heap.py: served under opsconsole/gunicorn.conf.py
as opsconsole.wsgi is, it answers what the worker's collector holds, as JSON."""

import gc
import json

from opsconsole.wsgi import application as opsconsole  # loaded as the worker loads opsconsole's


def application(environ, start_response):
    if environ.get("PATH_INFO") != "/heap":
        return opsconsole(environ, start_response)
    body = json.dumps({"frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects())}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
