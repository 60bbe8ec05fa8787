"""A gunicorn worker freezes what it loaded (opsconsole/gunicorn.conf.py, ``post_worker_init``): the
application's modules, routes and schemas live as long as the worker, and the collector's full
passes no longer walk them. Loaded by the master before the fork (``--preload``), they are frozen
as the worker inherited them.

A real gunicorn with the project's configuration, serving opsconsole's application beside one path
that answers the worker's collector counts (tests/faults/frozen_heap_app.py).
"""

import httpx
import pytest

from tests.faults.gunicorn import running_gunicorn

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("arguments", ["", "--preload"], ids=["loaded-by-the-worker", "loaded-before-the-fork"])
def test_a_worker_freezes_the_application_it_loaded(tmp_path, arguments):
    env = {"WEB_CONCURRENCY": "1", "GUNICORN_CMD_ARGS": arguments}
    with running_gunicorn(tmp_path, app="tests.faults.frozen_heap_app:application", env=env) as server:
        heap = httpx.get(f"{server.url}/heap", timeout=10).json()
        login = httpx.get(f"{server.url}/accounts/login/", timeout=10)

    # Django, the routes and their models are in the permanent generation; what the collector
    # still tracks is what requests made since (the readiness check's login page among them).
    assert heap["frozen"] > 50_000, heap
    assert heap["tracked"] < heap["frozen"] / 5, heap
    assert login.status_code == 200  # the application itself still answers
