"""Django's PostgreSQL backend, its per-request health check done without a round trip.

With ``CONN_HEALTH_CHECKS`` Django sends ``SELECT 1`` before the first query of every request (and
of every django-q2 task) on a connection kept from an earlier one: a round trip, and ~5 % of an API
worker's CPU, to learn what the connection's socket already tells. A server that ends a session
(a restart, ``pg_terminate_backend``, a crash) sends its FATAL message or closes the socket while
the client is idle: the socket is then readable although no statement is outstanding. So the check
asks the socket (``poll``, no wait), lets libpq read and parse what is there, and finds the
connection dead when that is the server's FATAL or the end of the stream. A dead connection is
closed before the request's first statement is sent, and that statement goes, once, on a new
connection: nothing ever reached the dead one, so nothing can have run twice, and a database
restart costs the next request neither a 503 nor a 500.

What the socket cannot tell (a host gone without closing, a network cut) a ``SELECT 1`` could not
either, short of a timeout: the statement then fails as it would have, and the API answers 503
(``opsconsole.middleware``), which an automation retries. A connection not idle at the check (in a
transaction, which a request does not begin before its first statement) is asked as Django asks.
"""

import logging
import select

import psycopg
from django.db.backends.postgresql import base
from psycopg import pq

logger = logging.getLogger("ledger")

# Readable this many times in a row, each time read, is not a server at rest: taken as dead.
_MAX_READS = 8


class DatabaseWrapper(base.DatabaseWrapper):
    ended_by_server = False  # the server sent its FATAL on this connection

    def get_new_connection(self, conn_params):
        connection = super().get_new_connection(conn_params)
        self.ended_by_server = False
        if self.pool is None:  # a pooled connection is not checked here: it comes back from the pool
            connection.add_notice_handler(self._server_said)
        return connection

    def _server_said(self, diagnostic) -> None:
        # A message from the server while no statement runs reaches libpq's notice processor: its
        # FATAL, sent as it ends the session, may come a moment before the end of the stream does.
        if diagnostic.severity_nonlocalized in ("FATAL", "PANIC"):
            self.ended_by_server = True

    def close_if_health_check_failed(self):
        if self.connection is None or not self.health_check_enabled or self.health_check_done:
            return
        if self.connection.info.transaction_status != pq.TransactionStatus.IDLE:
            super().close_if_health_check_failed()
            return
        if self.found_closed_by_server():
            logger.warning(
                "database connection found closed by the server before its first statement; reconnecting",
                extra={"database": self.alias},
            )
            self.close()
        self.health_check_done = True

    def found_closed_by_server(self) -> bool:
        """Whether the server ended this idle session: what it sent since (its FATAL, the end of
        the stream) read without waiting. Notices and notifications leave it alive (libpq keeps
        notifications for psycopg to hand out)."""
        pgconn = self.connection.pgconn
        if pgconn.status != pq.ConnStatus.OK:
            return True
        poller = select.poll()
        poller.register(pgconn.socket, select.POLLIN)
        for _ in range(_MAX_READS):
            if not poller.poll(0):
                return self.ended_by_server
            try:
                pgconn.consume_input()
            except psycopg.OperationalError:
                return True
            pgconn.is_busy()  # libpq parses what it read: a FATAL reaches _server_said
            if pgconn.status != pq.ConnStatus.OK or self.ended_by_server:
                return True
        return True
