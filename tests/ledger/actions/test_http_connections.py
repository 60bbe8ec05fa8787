"""Calls to a destination reuse their thread's client and its kept-alive connection
(ledger.actions.http): counted at a real HTTP/1.1 server, the stand-in, by the TCP connections it
accepts. A failed call leaves no broken client behind."""

import os
import threading
import time

import pytest

from ledger.actions import http
from ledger.outcomes import AmbiguousError, TransientError
from standin.server import start_in_thread
from standin.store import validate_fault


@pytest.fixture
def destination(settings):
    """A stand-in served from a thread of this process; this thread starts and ends without a client."""
    server, url = start_in_thread()
    settings.OPSCONSOLE_HTTP_TIMEOUT_SECONDS = 5.0
    http.close_thread_client()
    yield server, url + "/records"
    http.close_thread_client()
    server.shutdown()


def create(url, reference="ref-1"):
    return http.send("POST", url, json={"reference": reference, "payload": {}}).json()


def fail_next(server, fault):
    server.store.add_faults([validate_fault(fault)])


def test_two_calls_in_one_thread_share_one_connection(destination):
    server, url = destination

    create(url, "ref-1")
    http.send("GET", url, params={"reference": "ref-1"})

    assert server.connections_accepted == 1
    assert server.store.stats()["requests"] == {"POST /records": 1, "GET /records": 1}


def test_each_thread_has_its_own_client_closed_when_the_thread_ends(destination):
    server, url = destination
    clients = {}

    def call(name):
        create(url, name)
        create(url, name + "-again")
        clients[name] = http.thread_client()

    threads = [threading.Thread(target=call, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert clients["a"] is not clients["b"]
    assert http.thread_client() not in clients.values()  # this thread's own, made just now
    assert server.connections_accepted == 2  # one per thread, two calls each
    assert clients["a"].is_closed
    assert clients["b"].is_closed


def test_a_reset_connection_leaves_no_broken_client(destination):
    server, url = destination
    create(url, "ref-1")
    before = http.thread_client()
    fail_next(server, {"kind": "reset_before"})

    with pytest.raises(AmbiguousError):
        create(url, "ref-2")

    assert before.is_closed
    assert create(url, "ref-3")["reference"] == "ref-3"
    assert server.connections_accepted == 2  # the reset one, then a new one


def test_a_timeout_leaves_no_broken_client_and_follows_the_setting_of_the_moment(destination, settings):
    server, url = destination
    create(url, "ref-1")  # the client, made under a 5 s timeout
    settings.OPSCONSOLE_HTTP_TIMEOUT_SECONDS = 0.3
    fail_next(server, {"kind": "delay", "seconds": 3})

    started = time.monotonic()
    with pytest.raises(AmbiguousError, match="ReadTimeout"):
        create(url, "ref-2")
    assert time.monotonic() - started < 2

    assert create(url, "ref-3")["reference"] == "ref-3"
    assert server.connections_accepted == 2


def test_a_stopped_destination_is_not_reached_through_its_kept_connection(destination, settings):
    """A stand-in that stops hangs up its connections: the next call finds no destination (never
    sent), and the one after reaches the stand-in now listening on that port, not the stopped one's
    handler through a kept connection (tests start a stand-in each, and one may get a stopped one's port)."""
    server, url = destination
    create(url, "ref-1")
    port = server.server_address[1]
    server.shutdown()
    settings.OPSCONSOLE_HTTP_TIMEOUT_SECONDS = 1.0

    with pytest.raises(TransientError, match="ConnectError"):
        create(url, "ref-2")

    successor, _ = start_in_thread(port=port)
    try:
        assert create(url, "ref-3")["reference"] == "ref-3"
        assert successor.connections_accepted == 1
        assert (server.store.stats()["records"], successor.store.stats()["records"]) == (1, 1)
    finally:
        successor.shutdown()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_without_its_parents_client(destination):
    server, url = destination
    create(url, "ref-1")
    parent_client = http.thread_client()

    pid = os.fork()
    if pid == 0:  # the child: report through the exit status only, never back into pytest
        ok = getattr(http._threads, "held", None) is None and http.thread_client() is not parent_client
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)

    assert os.waitstatus_to_exitcode(status) == 0
    assert not parent_client.is_closed
    assert create(url, "ref-2")["reference"] == "ref-2"
    assert server.connections_accepted == 1


@pytest.fixture
def fresh_call_threads(monkeypatch):
    """A worker's call threads as a new worker process has them: none yet (threads earlier tests
    left idle would each open a connection of their own when a call lands on them)."""
    from ledger.engine import processing

    monkeypatch.setattr(processing, "_call_threads", None)
    yield
    if processing._call_threads is not None:
        processing._call_threads.shutdown(wait=True)


def test_a_worker_s_batches_reuse_the_connections_of_the_ones_before(db, workspace, settings, fresh_call_threads):
    """The call threads outlive a batch (ledger.engine.processing.call_threads), and with them their
    clients' kept-alive connections: five batches of four calls open at most one connection per
    thread that ever made a call, the worker's own and four in flight at once, not one per call."""
    from ledger.engine.processing import process_due_operations
    from ledger.intake.submit import submit_event
    from ledger.models import Operation
    from tests.conftest import external_event

    server, url = start_in_thread()
    settings.OPSCONSOLE_STANDIN_URL = url
    settings.OPSCONSOLE_HTTP_TIMEOUT_SECONDS = 5.0
    try:
        for batch in "ABCDE":
            for number in range(4):
                event = external_event("file-ticket", delivery_id=f"{batch}{number}", request_id=f"{batch}{number}")
                assert submit_event(workspace=workspace, raw=event, source="api").outcome == "accepted"
            process_due_operations(worker="w1")
    finally:
        server.shutdown()

    assert Operation.objects.filter(state="succeeded").count() == 20
    assert server.store.stats()["requests"]["POST /records"] == 20
    assert server.connections_accepted <= 1 + 4
