"""A tiny forward HTTP proxy, as an operator's egress proxy named in ``HTTP_PROXY``/``HTTPS_PROXY``:
absolute-form requests (``POST http://host/path``) are passed on, CONNECT opens a tunnel. It plays
the network beyond it too: whatever host a request names, it connects to ``upstream`` (a stand-in
on 127.0.0.1), so a test can call a public name through it without leaving the machine. ``seen``
lists the request lines in the order they arrived."""

import http.client
import select
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer", "upgrade"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_CONNECT(self):
        self.server.seen.append(f"CONNECT {self.path}")
        upstream = socket.create_connection(self.server.upstream)
        self.send_response(200, "Connection established")
        self.end_headers()
        sockets = [self.connection, upstream]
        while True:
            readable, _, _ = select.select(sockets, [], [], 5)
            if not readable:
                break
            for ready in readable:
                data = ready.recv(65536)
                if not data:
                    upstream.close()
                    return
                (upstream if ready is self.connection else self.connection).sendall(data)
        upstream.close()

    def _forward(self):
        self.server.seen.append(f"{self.command} {self.path}")
        target = urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {name: value for name, value in self.headers.items() if name.lower() not in HOP_BY_HOP}
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=5)
        path = target.path + (f"?{target.query}" if target.query else "")
        upstream.request(self.command, path, body=body, headers=headers)
        answer = upstream.getresponse()
        content = answer.read()
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in HOP_BY_HOP | {"content-length", "transfer-encoding"}:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)
        upstream.close()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward


class ForwardProxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: tuple[str, int]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream
        self.seen: list[str] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self):
        self.shutdown()
        self.server_close()
