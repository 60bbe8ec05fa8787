"""opsconsole's WSGI application under cProfile, for bench/profile_request.py (one gunicorn worker).

    WEB_CONCURRENCY=1 gunicorn -c opsconsole/gunicorn.conf.py profiled_wsgi:application

Run from a checkout (the working directory, first on ``sys.path``, decides which opsconsole is
profiled) with this folder on ``PYTHONPATH``, so one copy of the wrapper profiles any checkout.
Every request is profiled (in CPU time) from the moment gunicorn hands it over until its body is built and the
response closed (Django's ``request_finished``, which also checks the connection), and every
statement Django sends is counted. Two paths of its own, never passed to Django:

- ``POST /__bench__/reset``: forget what was profiled and counted so far;
- ``GET /__bench__/report?sort=cumulative&limit=30``: the profile as ``pstats`` prints it, then
  the requests profiled, the statements per request and the statements of the last request;
  ``dump=FILE`` also writes the profile there (``pstats`` reads it).
"""

import cProfile
import io
import pstats
import time
from urllib.parse import parse_qs

from django.db import connection

from opsconsole.wsgi import application as django_application


def _profiler() -> cProfile.Profile:
    # CPU time, not wall time: waiting for the database or the client is not this process's cost.
    return cProfile.Profile(time.process_time)


_state = {"profiler": _profiler(), "requests": 0, "statements": 0, "last": []}


def application(environ, start_response):
    path = environ.get("PATH_INFO", "")
    if path == "/__bench__/reset":
        _state.update(profiler=_profiler(), requests=0, statements=0, last=[])
        return _text(start_response, "reset\n")
    if path == "/__bench__/report":
        return _text(start_response, _report(parse_qs(environ.get("QUERY_STRING", ""))))
    return _profiled(environ, start_response)


def _profiled(environ, start_response):
    statements = []

    def count(execute, sql, params, many, context):
        statements.append(" ".join(sql.split())[:160])
        return execute(sql, params, many, context)

    profiler = _state["profiler"]
    profiler.enable()
    try:
        with connection.execute_wrapper(count):
            response = django_application(environ, start_response)
            try:
                body = b"".join(response)
            finally:
                response.close()
    finally:
        profiler.disable()
    _state["requests"] += 1
    _state["statements"] += len(statements)
    _state["last"] = statements
    return [body]


def _report(query: dict) -> str:
    sort = query.get("sort", ["cumulative"])[0]
    limit = int(query.get("limit", ["30"])[0])
    out = io.StringIO()
    stats = pstats.Stats(_state["profiler"], stream=out)
    if dump := query.get("dump"):
        stats.dump_stats(dump[0])  # for pstats or snakeviz, beside the text
    stats.strip_dirs().sort_stats(sort).print_stats(limit)
    requests = _state["requests"] or 1
    out.write(f"requests profiled: {_state['requests']}\n")
    out.write(f"statements per request: {_state['statements'] / requests:.2f}\n")
    out.write("statements of the last request:\n")
    out.writelines(f"  {statement}\n" for statement in _state["last"])
    return out.getvalue()


def _text(start_response, text: str):
    body = text.encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
