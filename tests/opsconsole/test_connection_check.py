"""The health check of a kept database connection sends nothing: a connection the server ended
while it was idle is found so from its socket and replaced before the first statement is sent
(opsconsole/postgresql/base.py); one still alive is used without a ``SELECT 1``."""

import logging
import select
import time
from types import SimpleNamespace
from unittest import mock

import psycopg
import pytest
from django.db import close_old_connections, connection, connections

from ledger.models import Operation
from tests.conftest import external_event

pytestmark = pytest.mark.django_db(transaction=True)


def terminate_backend_of(conn) -> None:
    """End ``conn``'s server session from another connection, and wait until it is gone."""
    pid = conn.connection.info.backend_pid
    settings = conn.get_connection_params()
    with psycopg.connect(**settings, autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone() == (True,)
        deadline = time.monotonic() + 10
        while other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
            assert time.monotonic() < deadline, "the terminated backend did not exit"
            time.sleep(0.01)


def request_starts() -> None:
    """What Django does as a request starts (request_started; the test client leaves it out)."""
    close_old_connections()


def test_it_sends_no_select_1_on_a_live_connection():
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    request_starts()
    with mock.patch.object(type(connections["default"]), "is_usable", side_effect=AssertionError("SELECT 1 sent")):
        assert Operation.objects.count() == 0
    assert connection.connection.info.backend_pid == pid  # the same session, kept


def test_a_connection_the_server_ended_is_replaced_before_the_first_statement(caplog):
    connection.ensure_connection()
    old_pid = connection.connection.info.backend_pid
    terminate_backend_of(connection)
    request_starts()

    with caplog.at_level(logging.WARNING, logger="ledger"):
        assert Operation.objects.count() == 0

    assert connection.connection.info.backend_pid != old_pid
    found = [r for r in caplog.records if "found closed by the server" in r.getMessage()]
    assert len(found) == 1


def test_after_a_terminated_connection_the_api_and_the_console_answer(client, token, reviewer):
    """Both kinds of request, each the first on a connection the server ended: answered normally
    (no 503, no 500), and the event recorded once."""
    client.force_login(reviewer)
    terminate_backend_of(connection)
    request_starts()
    response = client.post(
        "/api/v1/events",
        external_event("send-notice", delivery_id="d-1", request_id="R-1"),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code in (200, 201, 202), response.content

    terminate_backend_of(connection)
    request_starts()
    page = client.get("/console/")
    assert page.status_code == 200

    assert Operation.objects.count() == 1


def test_a_connection_in_a_transaction_is_asked_as_django_asks():
    """Not idle (a transaction open): the check is Django's own."""
    connection.ensure_connection()
    connection.health_check_done = False
    connection.connection.execute("BEGIN")
    try:
        with mock.patch.object(type(connections["default"]), "is_usable", return_value=True) as asked:
            connection.close_if_health_check_failed()
        assert asked.called
    finally:
        connection.connection.execute("ROLLBACK")


def test_a_notification_waiting_on_the_socket_leaves_the_connection_alive():
    """The qcluster's pusher LISTENs on its connection: a notification that came while it was idle
    makes the socket readable, and is no sign of a dead session."""
    with connection.cursor() as cursor:
        cursor.execute("LISTEN opsconsole_check")
    pid = connection.connection.info.backend_pid
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
        other.execute("NOTIFY opsconsole_check")
    deadline = time.monotonic() + 5
    while not select.select([connection.connection.fileno()], [], [], 0.05)[0]:
        assert time.monotonic() < deadline, "the notification never arrived"
    request_starts()

    assert Operation.objects.count() == 0
    assert connection.connection.info.backend_pid == pid


def test_a_fatal_message_is_enough_without_the_end_of_the_stream(caplog):
    """The server's FATAL (libpq hands it to the notice handler while idle) can come a moment
    before the socket closes: it alone marks the session as ended."""
    wrapper = connections["default"]
    wrapper.ensure_connection()
    old_pid = wrapper.connection.info.backend_pid
    wrapper._server_said(SimpleNamespace(severity_nonlocalized="FATAL"))
    request_starts()

    with caplog.at_level(logging.WARNING, logger="ledger"):
        assert Operation.objects.count() == 0

    assert wrapper.connection.info.backend_pid != old_pid
    assert not wrapper.ended_by_server  # the new connection's own
    assert [r.getMessage() for r in caplog.records if "found closed" in r.getMessage()] != []
