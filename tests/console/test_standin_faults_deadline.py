"""The console's line about the stand-in's scripted faults never holds a page for as long as a
stand-in takes to answer: one that answers a byte at a time (each read within httpx's timeout, the
whole answer far beyond it) shows nothing, and the page goes on while it is still answering."""

import socket
import threading

import pytest

from opsconsole.console import standin_faults


@pytest.fixture
def dripping():
    """A local server that answers every request with headers and then a byte every 50 ms, for up to
    30 s or until told to stop; ``finished`` is set once it has sent the whole answer."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop, finished = threading.Event(), threading.Event()

    def serve():
        connection, _ = listener.accept()
        with connection:
            connection.recv(4096)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 600\r\n\r\n")
            for _ in range(600):
                if stop.wait(0.05):
                    return
                try:
                    connection.sendall(b" ")
                except OSError:
                    return
            finished.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", finished
    stop.set()
    thread.join()
    listener.close()
    # The question left waiting ends with the connection: the next test asks afresh.
    assert standin_faults._asking.acquire(timeout=10)
    standin_faults._asking.release()


def test_a_standin_that_drips_its_answer_shows_nothing_and_the_page_goes_on(settings, dripping):
    url, finished = dripping
    settings.OPSCONSOLE_SHOW_STANDIN_FAULTS = True
    settings.OPSCONSOLE_STANDIN_URL = url

    assert standin_faults.queued() is None
    assert not finished.is_set()  # the answer was still coming when the page went on
    assert standin_faults.queued() is None  # and the next page does not queue behind it
