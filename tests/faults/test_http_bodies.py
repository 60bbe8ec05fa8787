"""Bodies as a real server hands them over: gunicorn, as ``make serve`` runs
it, decodes a chunked transfer and passes no Content-Length; the API reads the stream it is given,
counting the bytes against the limit as it reads. And a gzip body is decoded within the limit.

Sent with ``http.client`` (``encode_chunked``) and a raw socket, so the wire is exactly what the
test says. PostgreSQL: the server and the test share the test database.
"""

import gzip
import http.client
import json
import socket

import pytest
from django.conf import settings

from ledger.models import Delivery, Operation
from tests.conftest import event
from tests.faults.gunicorn import running_gunicorn

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def gunicorn(django_db_setup, django_db_blocker, tmp_path_factory):
    """One server for the module (two workers: starting one is most of the time these tests take);
    each test's rows are its own (``server``)."""
    with django_db_blocker.unblock():
        with running_gunicorn(tmp_path_factory.mktemp("gunicorn"), env={"WEB_CONCURRENCY": "2"}) as running:
            yield running


@pytest.fixture
def server(gunicorn, transactional_db):
    return gunicorn


def post_chunked(server, token: str, chunks, path="/api/v1/events", headers=None) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request(
            "POST",
            path,
            body=iter(chunks),
            encode_chunked=True,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json", **(headers or {})},
        )
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_a_chunked_event_is_read_whole_and_taken(server, token):
    body = json.dumps(event()).encode()
    chunks = [body[i : i + 7] for i in range(0, len(body), 7)]

    first = post_chunked(server, token, chunks)
    again = post_chunked(server, token, [body])

    assert first[0] == 201, (first, server.log_tail())
    assert again[0] == 200
    assert again[1]["key"] == first[1]["key"]
    assert Operation.objects.get().payload["title"] == "Review renewal options"


def test_a_chunked_batch_is_read_whole(server, token):
    body = json.dumps({"events": [event(f"d-{n}", request_id=f"R-{n}") for n in range(40)]}).encode()

    status, answer = post_chunked(
        server, token, [body[i : i + 100] for i in range(0, len(body), 100)], path="/api/v1/events/batch"
    )

    assert status == 200, (answer, server.log_tail())
    assert [result["http_status"] for result in answer["results"]] == [201] * 40


def test_a_chunked_body_over_the_limit_is_refused_413(server, token):
    limit = settings.OPSCONSOLE_MAX_BODY_BYTES
    body = json.dumps(event(title="x" * limit)).encode()

    status, answer = post_chunked(server, token, [body[i : i + 4096] for i in range(0, len(body), 4096)])

    assert status == 413, (answer, server.log_tail())
    assert (answer["reason"], answer["limit_bytes"]) == ("too_large", limit)
    assert Delivery.objects.get().outcome == Delivery.Outcome.INVALID
    assert Operation.objects.count() == 0


def test_a_chunked_body_on_a_raw_socket(server, token):
    """The framing written by hand: two chunks, a chunk extension, the last chunk, no trailer."""
    body = json.dumps(event()).encode()
    head, tail = body[:10], body[10:]
    request = (
        (
            f"POST /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        ).encode()
        + f"{len(head):x}\r\n".encode()
        + head
        + b"\r\n"
    )
    request += f"{len(tail):x};ext=1\r\n".encode() + tail + b"\r\n0\r\n\r\n"

    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk

    status_line = received.split(b"\r\n", 1)[0]
    assert status_line == b"HTTP/1.1 201 Created", (received[:500], server.log_tail())


def test_a_gzip_event_is_decoded(server, token):
    body = gzip.compress(json.dumps(event()).encode())

    status, answer = post_chunked(server, token, [body], headers={"Content-Encoding": "gzip"})

    assert status == 201, (answer, server.log_tail())
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.request(
        "POST",
        "/api/v1/events",
        body=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    response = connection.getresponse()
    assert response.status == 200, response.read()  # the same event, with a Content-Length this time
    connection.close()


def test_a_gzip_bomb_is_refused_413(server, token):
    padded = json.dumps(event())[:-1] + " " * (64 * 1024 * 1024) + "}"
    body = gzip.compress(padded.encode(), compresslevel=9)

    status, answer = post_chunked(server, token, [body], headers={"Content-Encoding": "gzip"})

    assert status == 413, (answer, server.log_tail())
    assert answer["reason"] == "too_large"
    assert Operation.objects.count() == 0
