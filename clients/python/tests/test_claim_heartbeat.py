"""While a claimed block runs, a background thread keeps the lease: it extends at its period, stops
when the block ends or the outcome is recorded, and a stale token marks the claim lost."""

import threading
import time
from datetime import datetime, timezone

import httpx
import pytest
from fake_claims import TOKEN, answer, claimed

from opsconsole_claims import ClaimLost, Ledger


def heartbeat_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("opsconsole-claims-heartbeat")]


def until(condition, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_the_heartbeat_extends_the_lease_while_the_block_runs(ledger, server):
    with ledger.claim("send-invoice", {}, lease_seconds=60) as claim:
        server.wait_for_heartbeats(3)
        assert claim.lease_expires_at == datetime(2030, 1, 1, 0, 2, tzinfo=timezone.utc)
        claim.succeeded()

    assert server.sent("heartbeat")[:3] == [{"token": TOKEN, "lease_seconds": 60}] * 3


def test_the_heartbeat_asks_for_the_action_s_lease_when_none_was_given(ledger, server):
    with ledger.claim("send-invoice", {}) as claim:
        server.wait_for_heartbeats(1)
        claim.succeeded()

    assert server.sent("heartbeat")[0] == {"token": TOKEN}


def test_the_heartbeat_stops_when_the_block_ends(ledger, server):
    with ledger.claim("send-invoice", {}) as claim:
        server.wait_for_heartbeats(2)
        claim.unknown()
    beats = len(server.sent("heartbeat"))
    time.sleep(0.1)  # five periods of the heartbeat

    assert len(server.sent("heartbeat")) == beats
    assert heartbeat_threads() == []


def test_the_heartbeat_stops_when_an_exception_ends_the_block(ledger, server):
    with pytest.raises(RuntimeError, match="boom"):  # noqa: PT012  the block's exit is under test
        with ledger.claim("send-invoice", {}):
            server.wait_for_heartbeats(1)
            raise RuntimeError("boom")

    assert heartbeat_threads() == []


def test_no_heartbeat_without_a_block(ledger, server):
    claim = ledger.claim("send-invoice", {})
    time.sleep(0.1)
    claim.succeeded()

    assert server.sent("heartbeat") == []


@pytest.mark.parametrize(
    ("lease_seconds", "date", "expires", "every"),
    [
        (60, None, "2030-01-01T00:01:00+00:00", 20.0),
        (None, "Tue, 01 Jan 2030 00:00:00 GMT", "2030-01-01T00:01:30+00:00", 30.0),  # the server's clock
        (None, None, None, 20.0),  # nothing to go by: the default lease, 60 s
    ],
)
def test_the_heartbeat_period_is_a_third_of_the_lease(server, lease_seconds, date, expires, every):
    response = claimed(lease_expires_at=expires)
    if date:
        response.headers["Date"] = date
    server.script("claim", response)
    ledger = Ledger("http://opsconsole.test", "t", transport=httpx.MockTransport(server.handle))

    assert ledger.claim("send-invoice", {}, lease_seconds=lease_seconds).heartbeat_every == every


def test_a_heartbeat_answered_stale_token_marks_the_claim_lost_and_nothing_more_is_sent(ledger, server):
    server.script("heartbeat", answer(409, "stale_token", message="the lease expired"))

    with pytest.raises(ClaimLost) as lost:  # noqa: PT012  the block's exit is under test
        with ledger.claim("send-invoice", {}) as claim:
            until(lambda: claim.lost)
            claim.succeeded(external_id="rec-1")

    assert "stale" in str(lost.value)
    assert server.sent("outcome") == [], "neither the report nor the block's end sends a stale token"
    assert len(server.sent("heartbeat")) == 1, "a lost claim stops heartbeating"


def test_an_outcome_answered_stale_token_raises_claim_lost(ledger, server):
    server.script("outcome", answer(409, "stale_token", message="not the current claim"))

    with pytest.raises(ClaimLost):
        with ledger.claim("send-invoice", {}) as claim:
            claim.succeeded(external_id="rec-1")

    assert claim.lost
    assert len(server.sent("outcome")) == 1


def test_a_failed_heartbeat_is_tried_again_sooner_and_its_error_shown_until_one_succeeds(server, sleeps):
    server.script("heartbeat", httpx.Response(503, headers={"Retry-After": "1"}))
    ledger = Ledger("http://opsconsole.test", "t", heartbeat_every=1.0, transport=httpx.MockTransport(server.handle))

    with ledger.claim("send-invoice", {}) as claim:
        server.wait_for_heartbeats(1)
        until(lambda: claim.heartbeat_error is not None)
        assert "503" in str(claim.heartbeat_error)
        server.wait_for_heartbeats(2)
        until(lambda: claim.heartbeat_error is None)
        assert not claim.lost
        claim.succeeded()

    first, second = server.heartbeat_arrivals()[:2]
    assert second - first < 0.8, "after a failure the next try comes at a third of the period (here 1 s)"
    assert sleeps == [], "a heartbeat is one try: the thread's own period retries it"


@pytest.mark.parametrize(
    "page",
    [
        httpx.Response(404, text="<html>Not Found</html>", headers={"Content-Type": "text/html"}),
        httpx.Response(409, text=""),
        httpx.Response(409, json={"status": "conflict"}),
    ],
)
def test_a_heartbeat_answered_404_or_409_by_a_proxy_s_page_does_not_lose_the_claim(ledger, server, page):
    """Only opsconsole's 409 stale_token (or its 404 not_found) says the lease is gone: a proxy's page
    (a deploy, a misroute) marked the claim lost, and its success was then never reported."""
    server.script("heartbeat", page)

    with ledger.claim("send-invoice", {}) as claim:
        server.wait_for_heartbeats(2)
        assert not claim.lost
        claim.succeeded(external_id="rec-1")

    assert len(server.sent("outcome")) == 1
