"""Every answer of POST /api/v1/claims becomes the right thing: a claim to act on, a claim not to act
on (done, or deferred with its reason), or a typed refusal. Never "go ahead" but for a 201."""

from datetime import datetime, timezone

import httpx
import pytest
from fake_claims import KEY, TOKEN, answer, claimed

from opsconsole_claims import ClaimError, Refused, ServiceUnavailable


def test_a_201_is_a_claim_to_act_on(ledger, server):
    claim = ledger.claim("send-invoice", {"request_id": "R-1"}, lease_seconds=60)

    assert claim.should_act
    assert claim.status == "claimed"
    assert (claim.key, claim.token, claim.attempt) == (KEY, TOKEN, 1)
    assert claim.idempotency_key == "idem-" + KEY
    assert claim.lease_expires_at == datetime(2030, 1, 1, 0, 1, tzinfo=timezone.utc)
    assert claim.operation["state"] == "running"


def test_the_claim_sends_the_envelope_with_the_token_and_leaves_out_what_is_not_given(ledger, server):
    ledger.claim(
        "send-invoice",
        {"request_id": "R-1", "version": 1},
        lease_seconds=30,
        delivery_id="d-1",
        occurred_at=datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc),
    )

    assert server.sent("claim") == [
        {
            "action": "send-invoice",
            "data": {"request_id": "R-1", "version": 1},
            "lease_seconds": 30,
            "delivery_id": "d-1",
            "occurred_at": "2026-05-01T12:00:00+00:00",
        }
    ]
    request = server.requests[0]
    assert (request.method, request.url.path) == ("POST", "/api/v1/claims")
    assert request.headers["Authorization"] == "Bearer secret-token"


def test_a_200_done_carries_the_recorded_result_and_says_do_not_act(ledger, server):
    server.script("claim", answer(200, "done", result={"invoice": "INV-7"}, external_id="rec-1"))

    with ledger.claim("send-invoice", {}) as claim:
        assert not claim.should_act
        assert claim.status == "done"
        assert (claim.result, claim.external_id) == ({"invoice": "INV-7"}, "rec-1")

    assert [r.url.path for r in server.requests] == ["/api/v1/claims"], "a done claim heartbeats and reports nothing"


TRANSIENT = {"category": "transient", "message": "the vendor answered 503"}


@pytest.mark.parametrize(
    ("http_status", "status", "fields"),
    [
        (409, "in_progress", {"retry_after": 12, "lease_expires_at": "2030-01-01T00:00:12+00:00"}),
        (
            409,
            "retry_later",
            {"retry_after": 30, "next_attempt_at": "2030-01-01T00:00:30+00:00", "last_error": TRANSIENT},
        ),
        (423, "held", {"retry_after": 60, "scope": "action", "reason": "vendor outage"}),
        (409, "awaiting_approval", {}),
        (409, "needs_review", {"last_error": {"category": "permanent", "message": "declined"}}),
        (409, "unknown", {"last_error": {"category": "ambiguous", "message": "the lease expired"}}),
        (409, "cancelled", {}),
        (409, "rejected", {}),
        (409, "superseded", {}),
        (409, "waiting", {"retry_after": 60}),
        (409, "a_status_of_a_later_server", {}),
    ],
)
def test_a_deferring_answer_is_a_claim_not_to_act_on(ledger, server, http_status, status, fields):
    server.script("claim", answer(http_status, status, message="not now", **fields))

    with ledger.claim("send-invoice", {}) as claim:
        assert not claim.should_act
        assert claim.status == status
        assert claim.http_status == http_status
        assert claim.retry_after == fields.get("retry_after")
        assert claim.message == "not now"
        assert claim.last_error == fields.get("last_error")
        assert claim.answer.get("scope") == fields.get("scope")

    assert len(server.requests) == 1, "a deferred claim heartbeats and reports nothing"


def test_a_deferring_answer_without_retry_after_in_its_body_takes_the_header(ledger, server):
    server.script("claim", answer(409, "in_progress", headers={"Retry-After": "7"}))

    assert ledger.claim("send-invoice", {}).retry_after == 7.0


@pytest.mark.parametrize(
    ("http_status", "body"),
    [
        (409, {"status": "blocked", "reason": "payload_conflict", "errors": [], "message": "changed payload"}),
        (409, {"status": "blocked", "reason": "stale", "errors": []}),
        (422, {"status": "blocked", "reason": "invalid_input", "errors": [{"loc": ["data", "amount_cents"]}]}),
        (413, {"status": "blocked", "reason": "too_large", "errors": []}),
        (400, {"status": "blocked", "reason": "malformed_json", "errors": []}),
        (401, {"status": "unauthorized", "message": "bad token"}),
        (404, {"status": "not_found"}),
    ],
)
def test_a_refusal_of_the_request_is_raised_typed(ledger, server, http_status, body):
    server.script("claim", httpx.Response(http_status, json=body))

    with pytest.raises(Refused) as refused:
        ledger.claim("send-invoice", {})

    assert refused.value.http_status == http_status
    assert refused.value.status == body["status"]
    assert refused.value.reason == body.get("reason", "")
    assert refused.value.errors == body.get("errors", [])
    assert refused.value.body == body
    assert str(http_status) in str(refused.value)


def test_a_success_answer_that_is_not_a_claim_is_an_error_not_a_go_ahead(ledger, server):
    server.script("claim", httpx.Response(201, json={"status": "accepted"}))

    with pytest.raises(ClaimError, match="cannot read"):
        ledger.claim("send-invoice", {})


def test_an_answer_that_is_not_json_is_the_service_failing_never_acted_on(ledger, server):
    """A proxy's page is not opsconsole's answer: the claim is sent again (it is safe to), and if
    nothing else answers, ServiceUnavailable."""
    page = httpx.Response(409, text="<html>conflict</html>")
    server.script("claim", page)

    assert ledger.claim("send-invoice", {}).should_act, "opsconsole's own answer, the second time"
    assert len(server.sent("claim")) == 2

    server.script("claim", *[httpx.Response(200, text="")] * 10)
    with pytest.raises(ServiceUnavailable):
        ledger.claim("send-invoice", {})


def test_the_key_travels_percent_encoded_in_the_heartbeat_and_outcome_paths(ledger, server):
    server.script("claim", claimed(key="send-invoice:R/1 ü:v1"))

    with ledger.claim("send-invoice", {}, lease_seconds=60) as claim:
        server.wait_for_heartbeats(1)
        claim.succeeded()

    paths = {request.url.raw_path.decode() for request in server.requests[1:]}
    assert paths == {
        "/api/v1/claims/send-invoice%3AR%2F1%20%C3%BC%3Av1/heartbeat",
        "/api/v1/claims/send-invoice%3AR%2F1%20%C3%BC%3Av1/outcome",
    }
