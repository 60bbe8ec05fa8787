"""The claims API played by an httpx.MockTransport, for the client's unit tests: they mock at the
client's boundary, its HTTP calls. The real server is exercised by tests/faults/test_claims_processes.py."""

import json
import threading
import time
from collections import deque
from typing import Any

import httpx

KEY = "send-invoice:R-1:v1"
TOKEN = "tok-1"
EXPIRES = "2030-01-01T00:01:00+00:00"


def claimed(**fields: Any) -> httpx.Response:
    return httpx.Response(
        201,
        json={
            "status": "claimed",
            "key": KEY,
            "token": TOKEN,
            "attempt": 1,
            "lease_expires_at": EXPIRES,
            "idempotency_key": "idem-" + KEY,
            "operation": {"key": KEY, "state": "running"},
        }
        | fields,
    )


def answer(http_status: int, status: str, headers: dict | None = None, **fields: Any) -> httpx.Response:
    return httpx.Response(http_status, json={"status": status, "key": KEY, **fields}, headers=headers)


class FakeClaims:
    """Answers each endpoint from its queue of scripted answers (an httpx.Response, or an exception
    to raise as the transport would), else as a healthy server would; keeps every request."""

    def __init__(self):
        self.requests: list[httpx.Request] = []
        self.arrivals: list[float] = []  # time.monotonic() of each request
        self.scripted: dict[str, deque] = {"claim": deque(), "heartbeat": deque(), "outcome": deque()}
        self.lock = threading.Lock()
        self.heartbeat_seen = threading.Condition(self.lock)

    def script(self, endpoint: str, *answers) -> None:
        self.scripted[endpoint].extend(answers)

    def sent(self, endpoint: str) -> list[dict]:
        with self.lock:
            return [json.loads(request.content) for request in self.requests if _endpoint(request) == endpoint]

    def wait_for_heartbeats(self, count: int, timeout: float = 5) -> None:
        with self.heartbeat_seen:
            assert self.heartbeat_seen.wait_for(lambda: len(self._heartbeats()) >= count, timeout), "no heartbeat"

    def heartbeat_arrivals(self) -> list[float]:
        with self.lock:
            return [
                at
                for at, request in zip(self.arrivals, self.requests, strict=True)
                if _endpoint(request) == "heartbeat"
            ]

    def _heartbeats(self) -> list[httpx.Request]:
        return [request for request in self.requests if _endpoint(request) == "heartbeat"]

    def handle(self, request: httpx.Request) -> httpx.Response:
        endpoint = _endpoint(request)
        with self.lock:
            self.requests.append(request)
            self.arrivals.append(time.monotonic())
            self.heartbeat_seen.notify_all()
            scripted = self.scripted[endpoint].popleft() if self.scripted[endpoint] else None
        if isinstance(scripted, Exception):
            raise scripted
        return scripted or self.healthy(endpoint, json.loads(request.content))

    def healthy(self, endpoint: str, body: dict) -> httpx.Response:
        if endpoint == "claim":
            return claimed()
        if endpoint == "heartbeat":
            return answer(200, "extended", lease_expires_at="2030-01-01T00:02:00+00:00")
        state = {"succeeded": "succeeded", "unknown": "unknown"}.get(body["outcome"])
        state = state or ("retrying" if body.get("category") == "transient" else "needs_review")
        return answer(200, "recorded", state=state, next_attempt_at=None, operation={"key": KEY, "state": state})


def _endpoint(request: httpx.Request) -> str:
    path = request.url.path
    return "heartbeat" if path.endswith("/heartbeat") else "outcome" if path.endswith("/outcome") else "claim"
