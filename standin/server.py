"""The stand-in destination: a tiny records API with faults that tests can inject.

Stdlib only on purpose: it plays another company's API, so it shares nothing with opsconsole
(no Django, no project imports) and can run as its own process or in a test's thread.
"""

from __future__ import annotations

import json
import re
import socket
import socketserver
import sys
import threading
from datetime import datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from standin.credentials import credential_echo, credential_of
from standin.store import (
    DEFAULT_PAGE_SIZE,
    MAX_BODY_BYTES,
    MAX_PAGE_SIZE,
    PAGE_PARAMS,
    RECORD_FILTERS,
    WINDOW_FILTERS,
    BadRequest,
    Store,
    validate_fault,
)

CONTROL_PATHS = (
    "/records",
    "/health",
    "/_faults",
    "/_faults/clear",
    "/_faults/count",
    "/_reset",
    "/_stats",
    "/_delete",
    "/_edit",
)
RECORD_PATH = re.compile(r"^/records/(?P<record_id>[^/]+)$")


def _aware_time(query, name):
    """A required ISO 8601 time with an offset from the query string."""
    if name not in query:
        raise BadRequest("invalid_query", f"a listing needs both {WINDOW_FILTERS}")
    try:
        value = datetime.fromisoformat(query[name][0])
    except ValueError:
        raise BadRequest("invalid_query", f"'{name}' is not an ISO 8601 time") from None
    if value.tzinfo is None:
        raise BadRequest("invalid_query", f"'{name}' needs a UTC offset")
    return value


def _whole_number(query, name, default):
    raw = query.get(name, [str(default)])[0]
    if not raw.isdigit():
        raise BadRequest("invalid_query", f"'{name}' must be a whole number")
    return int(raw)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like a real API behind a pooled client
    server_version = "standin/1"
    timeout = 30  # idle keep-alive connections do not pin a thread forever
    disable_nagle_algorithm = True  # headers and body go out in two writes; no 40 ms delayed-ACK stall

    def do_GET(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def do_PUT(self):
        self._dispatch()

    def do_PATCH(self):
        self._dispatch()

    def do_DELETE(self):
        self._dispatch()

    @property
    def store(self):
        return self.server.store

    def _dispatch(self):
        url = urlsplit(self.path)
        route, args = self._route(url.path)
        self.store.count_request(f"{self.command} {route or url.path}")
        try:
            # Read the body before anything else so a keep-alive connection stays in step.
            raw = self._read_body()
            if route is None:
                raise BadRequest("not_found", f"no route for {url.path}", status=404)
            handler = ROUTES.get((self.command, route))
            if handler is None:
                raise BadRequest("method_not_allowed", f"{self.command} is not allowed on {route}", status=405)
            handler(self, raw=raw, query=parse_qs(url.query, keep_blank_values=True), **args)
        except BadRequest as refused:
            self._answer(refused.status, {"error": refused.error, "detail": refused.detail})

    @staticmethod
    def _route(path):
        if path in CONTROL_PATHS:
            return path, {}
        match = RECORD_PATH.match(path)
        if match:
            return "/records/<id>", match.groupdict()
        return None, {}

    def _read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            raise BadRequest("length_required", "send a Content-Length body, not chunked", status=411)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            raise BadRequest("invalid_body", "Content-Length is not an integer") from None
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            raise BadRequest("body_too_large", f"body is over {MAX_BODY_BYTES} bytes", status=413)
        return self.rfile.read(length) if length > 0 else b""

    @staticmethod
    def _json_object(raw):
        try:
            body = json.loads(raw)
        except ValueError as error:
            raise BadRequest("invalid_json", f"body is not JSON: {error}") from None
        if not isinstance(body, dict):
            raise BadRequest("invalid_body", "body must be a JSON object")
        return body

    def _answer(self, status, body, headers=()):
        """Answers ``body`` as JSON (bytes: JSON text already written)."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers:
                self.send_header(name, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except (ConnectionError, TimeoutError):
            # The client gave up (for example while a delay fault slept): nobody is listening.
            self.close_connection = True

    def _hang_up(self):
        """Closes the connection without writing a status line."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def send_error(self, code, message=None, explain=None):
        # http.server's own errors (bad request line, unknown method) are HTML; keep every answer JSON.
        self.close_connection = True
        error = HTTPStatus(code).phrase.lower().replace(" ", "_") if code in HTTPStatus._value2member_map_ else "error"
        self._answer(code, {"error": error, "detail": message or ""})

    def log_message(self, format, *args):
        if self.server.verbose:
            super().log_message(format, *args)

    def _fail_before_acting(self, fault):
        """Plays a status, reset_before or echo_credential fault; returns True when it answered (or
        hung up) instead."""
        kind = fault["kind"] if fault else None
        if kind == "status":
            headers = [("Retry-After", str(fault["retry_after"]))] if "retry_after" in fault else []
            said = {
                "error": fault.get("error", "injected_fault"),
                "detail": fault.get("detail", f"status {fault['status']}"),
            }
            self._answer(fault["status"], said, headers)
            return True
        if kind == "reset_before":
            self._hang_up()
            return True
        if kind == "echo_credential":
            body, headers = credential_echo(credential_of(self.headers))
            self._answer(fault["status"], body, headers)
            return True
        return False

    def _delay(self, fault):
        if fault and fault["kind"] == "delay":
            # Wakes early only when the server shuts down, so a stopping test never waits it out.
            self.server.stopping.wait(fault["seconds"])

    # Routes. Each takes the raw body and the parsed query string.

    def post_records(self, *, raw, query):
        fault = self.store.next_fault("create")
        if self._fail_before_acting(fault):
            return
        kind = fault["kind"] if fault else None
        try:
            status, body, headers = self._create_record(raw)
        except BadRequest as refused:
            status, body, headers = refused.status, {"error": refused.error, "detail": refused.detail}, []
        if kind == "drop_after_commit":
            self._hang_up()
            return
        self._delay(fault)
        self._answer(status, body, headers)

    def _create_record(self, raw):
        body = self._json_object(raw)
        reference = body.get("reference")
        if not isinstance(reference, str) or not reference:
            raise BadRequest("invalid_body", "'reference' is required and must be a non-empty string")
        if "payload" not in body or not isinstance(body["payload"], dict):
            raise BadRequest("invalid_body", "'payload' is required and must be a JSON object")
        key = self.headers.get("Idempotency-Key")
        if key is not None and not key.strip():
            raise BadRequest("invalid_body", "Idempotency-Key must not be blank when sent")
        outcome, record = self.store.create(reference=reference, payload=body["payload"], idempotency_key=key)
        if outcome == "key_reused":
            raise BadRequest(
                "idempotency_key_reused", "this Idempotency-Key was used with a different body", status=422
            )
        if outcome == "replayed":
            return 200, record, [("Idempotent-Replayed", "true")]
        return 201, record, []

    def get_records(self, *, raw, query):
        fault = self.store.next_fault("lookup")
        if self._fail_before_acting(fault):
            return
        try:
            if set(query) & set(WINDOW_FILTERS + PAGE_PARAMS):
                status, body = 200, self._list_records(query)
            else:
                status, body = 200, {"records": self._find_records(query)}
        except BadRequest as refused:
            status, body = refused.status, {"error": refused.error, "detail": refused.detail}
        # The answer is what the records were when the request arrived, however late it is sent.
        self._delay(fault)
        self._answer(status, body)

    def _find_records(self, query):
        unknown = sorted(set(query) - set(RECORD_FILTERS))
        if unknown:
            raise BadRequest("unknown_filter", f"unknown filter(s) {', '.join(unknown)}; use {RECORD_FILTERS}")
        return self.store.find({name: values[0] for name, values in query.items()})

    def _list_records(self, query):
        """``GET /records?created_after=&created_before=[&page_size=][&cursor=]``: one page of the
        records created in the window, and the cursor of the next page (null on the last)."""
        unknown = sorted(set(query) - set(WINDOW_FILTERS + PAGE_PARAMS))
        if unknown:
            raise BadRequest(
                "unknown_filter", f"a listing takes {WINDOW_FILTERS + PAGE_PARAMS}, not {', '.join(unknown)}"
            )
        window = {name: _aware_time(query, name) for name in WINDOW_FILTERS}
        page_size = _whole_number(query, "page_size", DEFAULT_PAGE_SIZE)
        if not 1 <= page_size <= MAX_PAGE_SIZE:
            raise BadRequest("invalid_query", f"'page_size' must be between 1 and {MAX_PAGE_SIZE}")
        records, next_cursor = self.store.listing(
            **window, page_size=page_size, cursor=_whole_number(query, "cursor", 0)
        )
        return {"records": records, "next_cursor": next_cursor}

    def get_record(self, *, raw, query, record_id):
        record = self.store.get(record_id)
        if record is None:
            raise BadRequest("not_found", f"no record {record_id}", status=404)
        self._answer(200, record)

    def get_health(self, *, raw, query):
        self._answer(200, {"ok": True})

    def post_faults(self, *, raw, query):
        body = self._json_object(raw)
        faults = body.get("faults")
        if not isinstance(faults, list):
            raise BadRequest("invalid_body", "'faults' must be a list of faults")
        # Validate all before queueing any, so a bad list queues nothing.
        self._answer(200, self.store.add_faults([validate_fault(fault) for fault in faults]))

    def get_faults(self, *, raw, query):
        self._answer(200, self.store.pending_faults())

    def post_faults_clear(self, *, raw, query):
        """Drops every queued fault, create and lookup; the records stay."""
        dropped = self.store.clear_faults()
        self._answer(200, {"ok": True, "dropped": dropped})

    def get_faults_count(self, *, raw, query):
        """How many faults are queued, without listing them (what the console shows)."""
        self._answer(200, self.store.fault_counts())

    def post_reset(self, *, raw, query):
        self.store.reset()
        self._answer(200, {"ok": True})

    def get_stats(self, *, raw, query):
        self._answer(200, self.store.stats())

    def post_delete(self, *, raw, query):
        record_id = self._json_object(raw).get("id")
        if self.store.delete(record_id) is None:
            raise BadRequest("not_found", f"no record {record_id}", status=404)
        self._answer(200, {"ok": True})

    def post_edit(self, *, raw, query):
        body = self._json_object(raw)
        if not isinstance(body.get("payload"), dict):
            raise BadRequest("invalid_body", "'payload' must be a JSON object")
        record = self.store.edit(body.get("id"), body["payload"])
        if record is None:
            raise BadRequest("not_found", f"no record {body.get('id')}", status=404)
        self._answer(200, record)


ROUTES = {
    ("POST", "/records"): Handler.post_records,
    ("GET", "/records"): Handler.get_records,
    ("GET", "/records/<id>"): Handler.get_record,
    ("GET", "/health"): Handler.get_health,
    ("POST", "/_faults"): Handler.post_faults,
    ("GET", "/_faults"): Handler.get_faults,
    ("POST", "/_faults/clear"): Handler.post_faults_clear,
    ("GET", "/_faults/count"): Handler.get_faults_count,
    ("POST", "/_reset"): Handler.post_reset,
    ("GET", "/_stats"): Handler.get_stats,
    ("POST", "/_delete"): Handler.post_delete,
    ("POST", "/_edit"): Handler.post_edit,
}


class StandinServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # concurrent test clients must not overflow the listen backlog

    def __init__(self, address, *, verbose=False, store_path=None):
        self.store = Store(store_path)
        self.stopping = threading.Event()
        self.verbose = verbose
        self.host = address[0]
        self.connections_accepted = 0  # a keep-alive client makes one for many requests
        self._open = set()  # accepted connections not yet closed
        self._open_lock = threading.Lock()
        super().__init__(address, Handler)

    def server_bind(self):
        # HTTPServer.server_bind calls socket.getfqdn(), a reverse DNS lookup that can stall; skip it.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    @property
    def base_url(self):
        return f"http://{self.host or self.server_address[0]}:{self.server_address[1]}"

    def process_request(self, request, client_address):
        with self._open_lock:
            self.connections_accepted += 1
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def shutdown(self):
        """Stops serving, wakes sleeping delay faults, closes the listening socket and hangs up the
        kept-alive connections, as a server that goes away does: a client's pool sees them closed
        instead of reaching a stopped stand-in's handlers (and its records) on a later call."""
        self.stopping.set()
        super().shutdown()
        self.server_close()
        self.store.close()
        with self._open_lock:
            still_open = list(self._open)
        for connection in still_open:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request, client_address):
        # Clients hanging up are part of the job here (timeouts, faults); anything else is a bug worth printing.
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


def start_in_thread(host="127.0.0.1", port=0, *, verbose=False, store_path=None):
    """Starts a stand-in on a daemon thread; returns (server, base_url). ``server.shutdown()`` stops it.

    The socket listens before this returns, so the base URL is usable at once. ``store_path``: a
    SQLite file its records are kept in (and read from on start); none keeps them in memory only.
    """
    server = StandinServer((host, port), verbose=verbose, store_path=store_path)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="standin", daemon=True)
    thread.start()
    return server, server.base_url
