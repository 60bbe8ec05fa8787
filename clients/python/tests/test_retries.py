"""The service's own failures (5xx, connection errors, timeouts) are retried with backoff, then raised
as ServiceUnavailable: never taken as "go ahead", never as a recorded report."""

import httpx
import pytest
from fake_claims import TOKEN, answer

from opsconsole_claims import Ledger, ServiceUnavailable


def unavailable(retry_after: str | None = None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after else {}
    return httpx.Response(503, json={"status": "unavailable"}, headers=headers)


def test_a_503_is_retried_after_its_retry_after(ledger, server, sleeps):
    server.script("claim", unavailable("2"), unavailable("3"))

    claim = ledger.claim("send-invoice", {})

    assert claim.should_act
    assert sleeps == [2.0, 3.0]
    assert len(server.sent("claim")) == 3


def test_retry_after_is_honoured_up_to_max_backoff(server, sleeps):
    server.script("claim", unavailable("120"))
    ledger = Ledger("http://x", "t", max_backoff=5, transport=httpx.MockTransport(server.handle))

    ledger.claim("send-invoice", {})

    assert sleeps == [5]


@pytest.mark.parametrize(
    "failure",
    [
        httpx.ConnectError("connection refused"),
        httpx.ConnectTimeout("connect timeout"),
        httpx.ReadTimeout("read timeout"),
        httpx.RemoteProtocolError("server disconnected"),
        httpx.Response(502),
        httpx.Response(500, text="Internal Server Error"),
    ],
)
def test_network_errors_and_server_errors_are_retried(ledger, server, sleeps, failure):
    server.script("claim", failure, failure)

    assert ledger.claim("send-invoice", {}).should_act
    assert len(sleeps) == 2


def test_the_backoff_doubles_with_jitter_up_to_its_cap(server, sleeps):
    server.script("claim", *[httpx.ConnectError("down")] * 6)
    ledger = Ledger(
        "http://x", "t", max_retries=6, backoff=1, max_backoff=5, transport=httpx.MockTransport(server.handle)
    )

    ledger.claim("send-invoice", {})

    ceilings = [1, 2, 4, 5, 5, 5]
    assert len(sleeps) == len(ceilings)
    for waited, ceiling in zip(sleeps, ceilings, strict=True):
        assert ceiling / 2 <= waited <= ceiling


def test_a_service_that_stays_down_raises_service_unavailable_after_the_bounded_attempts(server, sleeps):
    server.script("claim", *[unavailable("1")] * 10)
    ledger = Ledger("http://x", "t", max_retries=3, transport=httpx.MockTransport(server.handle))

    with pytest.raises(ServiceUnavailable) as down:
        ledger.claim("send-invoice", {})

    assert (down.value.attempts, down.value.status_code, down.value.retry_after) == (4, 503, 1.0)
    assert len(server.sent("claim")) == 4
    assert len(sleeps) == 3


def test_service_unavailable_keeps_the_network_error_as_its_cause(server):
    server.script("claim", *[httpx.ConnectError("connection refused")] * 3)
    ledger = Ledger("http://x", "t", max_retries=2, transport=httpx.MockTransport(server.handle))

    with pytest.raises(ServiceUnavailable, match="ConnectError") as down:
        ledger.claim("send-invoice", {})

    assert isinstance(down.value.__cause__, httpx.ConnectError)
    assert down.value.status_code is None


def test_a_report_is_retried_with_the_same_token_and_body(ledger, server, sleeps):
    server.script("outcome", unavailable("1"), httpx.ReadTimeout("lost answer"))

    with ledger.claim("send-invoice", {}) as claim:
        claim.succeeded(external_id="rec-1", result={"n": 1})

    body = {"token": TOKEN, "outcome": "succeeded", "external_id": "rec-1", "result": {"n": 1}}
    assert server.sent("outcome") == [body] * 3
    assert claim.status == "done"


def test_a_report_that_cannot_reach_the_service_raises_and_the_block_sends_nothing_more(server, sleeps):
    server.script("outcome", *[unavailable()] * 3)
    ledger = Ledger("http://x", "t", max_retries=2, heartbeat_every=10, transport=httpx.MockTransport(server.handle))

    with pytest.raises(ServiceUnavailable):
        with ledger.claim("send-invoice", {}) as claim:
            claim.succeeded(external_id="rec-1")

    assert len(server.sent("outcome")) == 3, "the lease's expiry makes it unknown; no fourth report"
    assert claim.reported is None


def test_when_the_report_of_an_exception_cannot_be_sent_the_exception_is_raised_with_a_note(server, sleeps):
    server.script("outcome", *[unavailable()] * 3)
    ledger = Ledger("http://x", "t", max_retries=2, heartbeat_every=10, transport=httpx.MockTransport(server.handle))

    with pytest.raises(KeyError) as raised:
        with ledger.claim("send-invoice", {}):
            raise KeyError("customer")

    assert any("could not be reported" in note for note in raised.value.__notes__)


def test_a_deferring_answer_is_not_retried_by_the_client(ledger, server, sleeps):
    server.script("claim", answer(409, "in_progress", retry_after=30, headers={"Retry-After": "30"}))

    assert ledger.claim("send-invoice", {}).status == "in_progress"
    assert sleeps == []
    assert len(server.sent("claim")) == 1
