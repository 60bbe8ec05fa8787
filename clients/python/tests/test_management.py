"""The management routes, events, batches, due work and claims by key: each method sends its route's
request (method, path with the key percent-encoded as one segment, body, query) and returns the
answer's body; a refusal raises Refused; the service's failures are retried. opsconsole is played
by an httpx.MockTransport that records what it was sent and answers what the test scripts."""

import json
from collections import deque
from typing import Any

import httpx
import pytest

from opsconsole_claims import Ledger, Refused, ServiceUnavailable
from opsconsole_claims.routes import ROUTES

KEY = "acme:R/7 v1?#%:issue-refund"  # every character a path segment cannot hold as it is
ENCODED = "acme%3AR%2F7%20v1%3F%23%25%3Aissue-refund"


class Recorder:
    """Answers each request with the next scripted response (default: 200 {"status": "ok"})."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.scripted: deque[httpx.Response | Exception] = deque()

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        scripted = self.scripted.popleft() if self.scripted else httpx.Response(200, json={"status": "ok"})
        if isinstance(scripted, Exception):
            raise scripted
        return scripted

    @property
    def last(self) -> httpx.Request:
        return self.requests[-1]

    def body(self) -> Any:
        return json.loads(self.last.content) if self.last.content else None


@pytest.fixture
def opsconsole() -> Recorder:
    return Recorder()


@pytest.fixture
def ops(opsconsole):
    with Ledger("http://opsconsole.test", "secret-token", transport=httpx.MockTransport(opsconsole.handle)) as client:
        yield client


# Each method, the request it sends: (call, method, raw path, body, query).
CALLS = [
    (
        lambda ops: ops.submit_event("issue-refund", {"request_id": "R-7"}, delivery_id="d-1"),
        "POST",
        "/api/v1/events",
        {"action": "issue-refund", "data": {"request_id": "R-7"}, "delivery_id": "d-1"},
        {},
    ),
    (
        lambda ops: ops.submit_batch([{"action": "a", "data": {}}]),
        "POST",
        "/api/v1/events/batch",
        {"events": [{"action": "a", "data": {}}]},
        {},
    ),
    (
        lambda ops: ops.due(action="send-invoice", limit=5),
        "GET",
        "/api/v1/claims/due",
        None,
        {"action": "send-invoice", "limit": "5"},
    ),
    (lambda ops: ops.due(), "GET", "/api/v1/claims/due", None, {}),
    (
        lambda ops: ops.operations(
            state="pending_approval", action="issue-refund", age="24h", q="R-", limit=20, cursor="c1"
        ),
        "GET",
        "/api/v1/operations",
        None,
        {"state": "pending_approval", "action": "issue-refund", "age": "24h", "q": "R-", "limit": "20", "cursor": "c1"},
    ),
    (lambda ops: ops.operations(destination="billing"), "GET", "/api/v1/operations", None, {"destination": "billing"}),
    (lambda ops: ops.operation(KEY), "GET", f"/api/v1/operations/{ENCODED}", None, {}),
    (
        lambda ops: ops.approve(KEY, fingerprint="9f2c"),
        "POST",
        f"/api/v1/operations/{ENCODED}/approve",
        {"fingerprint": "9f2c"},
        {},
    ),
    (
        lambda ops: ops.approve(KEY, fingerprint="9f2c", reason="matches the ticket"),
        "POST",
        f"/api/v1/operations/{ENCODED}/approve",
        {"fingerprint": "9f2c", "reason": "matches the ticket"},
        {},
    ),
    (
        lambda ops: ops.reject(KEY, fingerprint="9f2c", reason="duplicate of R-6"),
        "POST",
        f"/api/v1/operations/{ENCODED}/reject",
        {"fingerprint": "9f2c", "reason": "duplicate of R-6"},
        {},
    ),
    (
        lambda ops: ops.replay(KEY, reason="template fixed", force_unknown=True),
        "POST",
        f"/api/v1/operations/{ENCODED}/replay",
        {"reason": "template fixed", "accept_config_change": False, "force_unknown": True},
        {},
    ),
    (
        lambda ops: ops.resolve(KEY, external_id="rec_81", note="seen in the vendor dashboard"),
        "POST",
        f"/api/v1/operations/{ENCODED}/resolve",
        {"external_id": "rec_81", "note": "seen in the vendor dashboard"},
        {},
    ),
    (
        lambda ops: ops.cancel(KEY, reason="sent by mistake"),
        "POST",
        f"/api/v1/operations/{ENCODED}/cancel",
        {"reason": "sent by mistake"},
        {},
    ),
    (lambda ops: ops.take(KEY), "POST", f"/api/v1/operations/{ENCODED}/take", {"take_over": False}, {}),
    (lambda ops: ops.take(KEY, take_over=True), "POST", f"/api/v1/operations/{ENCODED}/take", {"take_over": True}, {}),
    (lambda ops: ops.release(KEY), "POST", f"/api/v1/operations/{ENCODED}/release", None, {}),
    (lambda ops: ops.apply_conflict(17, reason="meant"), "POST", "/api/v1/conflicts/17/apply", {"reason": "meant"}, {}),
    (lambda ops: ops.dismiss_conflict(18, reason="old"), "POST", "/api/v1/conflicts/18/dismiss", {"reason": "old"}, {}),
    (lambda ops: ops.pauses(), "GET", "/api/v1/pauses", None, {}),
    (
        lambda ops: ops.pause(scope="destination", destination="billing", reason="INC-42"),
        "POST",
        "/api/v1/pauses",
        {"scope": "destination", "destination": "billing", "reason": "INC-42"},
        {},
    ),
    (lambda ops: ops.resume(7), "DELETE", "/api/v1/pauses/7", None, {}),
]


@pytest.mark.parametrize(("call", "method", "path", "body", "query"), CALLS)
def test_each_method_sends_its_routes_request_and_returns_the_answers_body(
    ops, opsconsole, call, method, path, body, query
):
    opsconsole.scripted.append(httpx.Response(200, json={"status": "done", "operation": {"state": "pending"}}))

    answered = call(ops)

    assert answered == {"status": "done", "operation": {"state": "pending"}}
    sent = opsconsole.last
    assert (sent.method, sent.url.raw_path.decode().split("?")[0]) == (method, path)
    assert opsconsole.body() == body
    assert dict(sent.url.params) == query
    assert sent.headers["Authorization"] == "Bearer secret-token"


def test_every_route_the_methods_call_is_in_the_table_the_openapi_check_reads(ops, opsconsole):
    """tests/connectors/test_python_client_openapi.py checks ROUTES against the app: each request
    a method sends must be one of them, with no field the table does not name."""
    for call, *_ in CALLS:
        call(ops)
    for request in opsconsole.requests:
        fields = set(json.loads(request.content)) if request.content else set()
        matching = [
            route
            for route in ROUTES.values()
            if route.method == request.method
            and _matches(route.template, request.url.raw_path.decode().split("?")[0])
            and fields <= set(route.body)
            and set(request.url.params) <= set(route.query)
        ]
        assert matching, f"{request.method} {request.url} {sorted(fields)} is in no route of ROUTES"


def _matches(template: str, path: str) -> bool:
    parts, sent = template.split("/"), path.split("/")
    return len(parts) == len(sent) and all(p.startswith("{") or p == s for p, s in zip(parts, sent, strict=True))


def test_a_201_answer_is_returned_too(ops, opsconsole):
    opsconsole.scripted.append(httpx.Response(201, json={"status": "accepted", "key": "k"}))

    assert ops.submit_event("issue-refund", {}) == {"status": "accepted", "key": "k"}


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (
            409,
            {
                "status": "refused",
                "reason": "stale_fingerprint",
                "detail": "read it again",
                "state": "pending_approval",
            },
            "stale_fingerprint",
        ),
        (403, {"status": "refused", "reason": "four_eyes", "detail": "you submitted it"}, "four_eyes"),
        (404, {"status": "not_found", "detail": "No such operation."}, ""),
        (
            422,
            {
                "status": "refused",
                "reason": "invalid_input",
                "detail": "reason: required",
                "errors": [{"field": "reason", "message": "required"}],
            },
            "invalid_input",
        ),
        (401, {"status": "unauthorized"}, ""),
    ],
)
def test_a_refusal_raises_refused_with_the_whole_answer(ops, opsconsole, status, body, reason):
    opsconsole.scripted.append(httpx.Response(status, json=body))

    with pytest.raises(Refused) as refused:
        ops.approve(KEY, fingerprint="9f2c")

    assert (refused.value.http_status, refused.value.reason, refused.value.body) == (status, reason, body)
    assert refused.value.message == body.get("detail", "")
    assert len(opsconsole.requests) == 1  # a refusal is not retried: it would be refused again


def test_a_blocked_event_raises_refused_with_its_conflict(ops, opsconsole):
    blocked = {"status": "blocked", "reason": "payload_conflict", "key": "k", "conflict_id": 17}
    opsconsole.scripted.append(httpx.Response(409, json=blocked))

    with pytest.raises(Refused) as refused:
        ops.submit_event("issue-refund", {"request_id": "R-7"})

    assert refused.value.body["conflict_id"] == 17
    assert str(refused.value) == "409 blocked (payload_conflict)"


def test_the_services_failures_are_retried_for_a_read_and_a_decision(ops, opsconsole, sleeps):
    opsconsole.scripted.extend(
        [
            httpx.Response(503, json={"status": "unavailable"}, headers={"Retry-After": "2"}),
            httpx.ConnectError("refused"),
            httpx.Response(200, json={"operations": [], "next_cursor": None}),
            httpx.ReadTimeout("timed out"),
            httpx.Response(200, json={"status": "cancelled"}),
        ]
    )

    assert ops.operations() == {"operations": [], "next_cursor": None}
    assert ops.cancel(KEY, reason="r")["status"] == "cancelled"

    assert len(sleeps) == 3
    assert sleeps[0] == 2.0
    assert [request.method for request in opsconsole.requests] == ["GET", "GET", "GET", "POST", "POST"]


def test_no_answer_after_the_retries_raises_service_unavailable(opsconsole, sleeps):
    opsconsole.scripted.extend([httpx.Response(502, text="bad gateway")] * 3)
    ops = Ledger("http://x", "t", max_retries=2, transport=httpx.MockTransport(opsconsole.handle))

    with pytest.raises(ServiceUnavailable) as unavailable:
        ops.resume(7)

    assert (unavailable.value.attempts, unavailable.value.status_code) == (3, 502)
    assert "DELETE /api/v1/pauses/7" in str(unavailable.value)


def test_every_operation_reads_page_after_page_with_the_filters(ops, opsconsole):
    opsconsole.scripted.extend(
        [
            httpx.Response(200, json={"operations": [{"key": "a"}, {"key": "b"}], "next_cursor": "c1"}),
            httpx.Response(200, json={"operations": [{"key": "c"}], "next_cursor": None}),
        ]
    )

    keys = [operation["key"] for operation in ops.every_operation(state="any", limit=2)]

    assert keys == ["a", "b", "c"]
    assert [dict(request.url.params) for request in opsconsole.requests] == [
        {"state": "any", "limit": "2"},
        {"state": "any", "limit": "2", "cursor": "c1"},
    ]


def test_a_claim_by_key_carries_the_data_and_reports_under_the_encoded_key(ops, opsconsole):
    data = {"request_id": "INV-7", "amount_cents": 4500}
    claimed = {"status": "claimed", "key": KEY, "token": "tok", "attempt": 2, "idempotency_key": KEY, "data": data}
    opsconsole.scripted.extend(
        [
            httpx.Response(201, json=claimed),
            httpx.Response(200, json={"status": "recorded", "state": "succeeded"}),
        ]
    )

    claim = ops.claim_by_key(KEY, lease_seconds=120)
    claim.succeeded(external_id="rec-1")

    assert (claim.should_act, claim.data, claim.attempt, claim.status) == (True, data, 2, "done")
    first, report = opsconsole.requests
    assert json.loads(first.content) == {"key": KEY, "lease_seconds": 120}
    assert first.url.raw_path == b"/api/v1/claims"
    assert report.url.raw_path.decode() == f"/api/v1/claims/{ENCODED}/outcome"
    assert json.loads(report.content) == {"token": "tok", "outcome": "succeeded", "external_id": "rec-1"}


def test_a_claim_by_key_is_answered_as_a_claim_is_and_an_unknown_key_refused(ops, opsconsole):
    opsconsole.scripted.extend(
        [
            httpx.Response(409, json={"status": "in_progress", "key": KEY, "retry_after": 30}),
            httpx.Response(404, json={"status": "not_found", "detail": "No such operation."}),
        ]
    )

    waiting = ops.claim_by_key(KEY)
    with pytest.raises(Refused) as refused:
        ops.claim_by_key("nope")

    assert (waiting.should_act, waiting.status, waiting.retry_after) == (False, "in_progress", 30.0)
    assert json.loads(opsconsole.requests[0].content) == {"key": KEY}
    assert refused.value.http_status == 404
