"""A notification receiver for the tests: a real HTTP server on a free port (a thread of the test's
process) that records every POST it takes, and can fail the next ones as a receiver in trouble does:
a status (``"503"``: refused before taking it) or ``hang_up`` (the request read whole, then the
connection closed with no answer)."""

import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str
    server: ThreadingHTTPServer
    received: list[Received] = field(default_factory=list)  # every request read whole, failed or not
    answered: list[Received] = field(default_factory=list)  # the ones answered 2xx
    faults: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail_next(self, *faults: str) -> None:
        with self.lock:
            self.faults.extend(faults)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_receiver() -> Receiver:
    receiver: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            taken = Received({name.lower(): value for name, value in self.headers.items()}, body)
            with receiver.lock:
                receiver.received.append(taken)
                fault = receiver.faults.pop(0) if receiver.faults else ""
                if not fault:
                    receiver.answered.append(taken)
            if fault == "hang_up":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            status = int(fault) if fault.isdigit() else 204
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request, client_address):
            pass  # a connection it hung up on itself

    server = Server(("127.0.0.1", 0), Handler)
    receiver = Receiver(f"http://127.0.0.1:{server.server_address[1]}/hooks", server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return receiver
