"""What a claim reports, by hand or when its block ends: never a silent success, never a retry of an
effect that may have happened."""

import logging

import httpx
import pytest
from fake_claims import TOKEN, answer

from opsconsole_claims import Ambiguous, ClaimError, Permanent, Refused


class VendorDown(Exception):
    pass


class CardDeclined(Permanent):
    pass


def test_succeeded_records_the_result_and_the_claim_reads_done(ledger, server):
    with ledger.claim("send-invoice", {}) as claim:
        recorded = claim.succeeded(external_id="rec-1", result={"invoice": "INV-7"})

    assert server.sent("outcome") == [
        {"token": TOKEN, "outcome": "succeeded", "external_id": "rec-1", "result": {"invoice": "INV-7"}}
    ]
    assert recorded["state"] == "succeeded"
    assert (claim.status, claim.reported) == ("done", "succeeded")
    assert (claim.result, claim.external_id) == ({"invoice": "INV-7"}, "rec-1")
    assert claim.should_act, "should_act stays what the claim's answer said"


def test_a_transient_failure_records_its_error_and_retry_after_and_the_claim_reads_retry_later(ledger, server):
    with ledger.claim("send-invoice", {}) as claim:
        claim.failed(category="transient", error="vendor said 503", retry_after=90)

    assert server.sent("outcome") == [
        {"token": TOKEN, "outcome": "failed", "category": "transient", "error": "vendor said 503", "retry_after": 90}
    ]
    assert claim.status == "retry_later"


def test_a_permanent_failure_reads_needs_review(ledger, server):
    with ledger.claim("send-invoice", {}) as claim:
        claim.failed(category="permanent", error="customer closed")

    assert server.sent("outcome") == [
        {"token": TOKEN, "outcome": "failed", "category": "permanent", "error": "customer closed"}
    ]
    assert claim.status == "needs_review"


def test_failed_takes_only_the_two_categories_and_a_retry_after_only_when_transient(ledger, server):
    with ledger.claim("send-invoice", {}) as claim:
        with pytest.raises(ValueError, match="transient"):
            claim.failed(category="maybe")
        with pytest.raises(ValueError, match="transient failure only"):
            claim.failed(category="permanent", retry_after=5)
        claim.unknown(error="gave up")

    assert [body["outcome"] for body in server.sent("outcome")] == ["unknown"]


def test_an_error_longer_than_the_server_keeps_is_cut(ledger, server):
    with ledger.claim("send-invoice", {}) as claim:
        claim.unknown(error="x" * 600)

    assert len(server.sent("outcome")[0]["error"]) == 500


def test_an_exception_before_acted_reports_a_transient_failure_and_is_raised(ledger, server):
    with pytest.raises(VendorDown):
        with ledger.claim("send-invoice", {}) as claim:
            raise VendorDown("connection refused")

    assert server.sent("outcome") == [
        {"token": TOKEN, "outcome": "failed", "category": "transient", "error": "VendorDown: connection refused"}
    ]
    assert claim.status == "retry_later"


@pytest.mark.parametrize(
    ("raised", "options"),
    [
        (Permanent("card declined"), {}),
        (CardDeclined("card declined"), {}),
        (ValueError("card declined"), {"permanent": (ValueError,)}),
    ],
)
def test_an_exception_that_says_permanent_reports_a_permanent_failure(ledger, server, raised, options):
    with pytest.raises(type(raised)):
        with ledger.claim("send-invoice", {}, **options):
            raise raised

    (report,) = server.sent("outcome")
    assert (report["outcome"], report["category"]) == ("failed", "permanent")
    assert "card declined" in report["error"]


def test_an_exception_after_acted_reports_unknown_never_failed(ledger, server):
    with pytest.raises(VendorDown, match="the answer was lost"):  # noqa: PT012  the block's exit is under test
        with ledger.claim("send-invoice", {}) as claim:
            claim.acted()
            raise VendorDown("the answer was lost")

    assert server.sent("outcome") == [
        {"token": TOKEN, "outcome": "unknown", "error": "VendorDown: the answer was lost"}
    ]
    assert claim.status == "unknown"


@pytest.mark.parametrize(
    ("raised", "options"),
    [
        (Ambiguous("read timeout"), {}),
        (TimeoutError("read timeout"), {"ambiguous": (TimeoutError,)}),
        # Ambiguous wins over permanent: the effect may be there, whatever else is said.
        (TimeoutError("read timeout"), {"ambiguous": (TimeoutError,), "permanent": (TimeoutError,)}),
    ],
)
def test_an_exception_marked_ambiguous_reports_unknown_before_acted_too(ledger, server, raised, options):
    with pytest.raises(type(raised)):
        with ledger.claim("send-invoice", {}, **options):
            raise raised

    assert [body["outcome"] for body in server.sent("outcome")] == ["unknown"]


def test_leaving_the_block_without_a_report_reports_unknown_not_success(ledger, server, caplog):
    with caplog.at_level(logging.WARNING, logger="opsconsole_claims"):
        with ledger.claim("send-invoice", {}) as claim:
            pass

    assert server.sent("outcome") == [
        {"token": TOKEN, "outcome": "unknown", "error": "the claim's block ended without reporting an outcome"}
    ]
    assert claim.status == "unknown"
    assert "without a report" in caplog.text


def test_an_exception_in_a_block_that_was_not_claimed_reports_nothing(ledger, server):
    server.script("claim", answer(409, "in_progress", retry_after=5))

    with pytest.raises(VendorDown):
        with ledger.claim("send-invoice", {}):
            raise VendorDown("unrelated")

    assert server.sent("outcome") == []


def test_a_claim_that_was_not_claimed_has_nothing_to_report(ledger, server):
    server.script("claim", answer(200, "done", result={}, external_id=None))

    with pytest.raises(ClaimError, match="answered done"):
        ledger.claim("send-invoice", {}).succeeded()

    assert server.sent("outcome") == []


def test_a_result_that_is_not_a_json_object_is_not_sent_and_the_block_reports_unknown(ledger, server):
    with pytest.raises(TypeError, match="dict"):
        with ledger.claim("send-invoice", {}) as claim:
            claim.succeeded(external_id="rec-1", result=["INV-7"])

    assert [body["outcome"] for body in server.sent("outcome")] == ["unknown"]


def test_a_second_report_is_refused_by_the_client(ledger, server):
    with ledger.claim("send-invoice", {}) as claim:
        claim.succeeded(external_id="rec-1")
        with pytest.raises(ClaimError, match="already reported"):
            claim.unknown()

    assert len(server.sent("outcome")) == 1


def test_a_report_after_the_exception_was_reported_is_not_sent_twice(ledger, server):
    with pytest.raises(VendorDown, match="then this"):  # noqa: PT012  the block's exit is under test
        with ledger.claim("send-invoice", {}) as claim:
            claim.failed(error="first")
            raise VendorDown("then this")

    assert [body["error"] for body in server.sent("outcome")] == ["first"]


def test_an_outcome_conflict_is_a_typed_refusal(ledger, server):
    server.script("outcome", answer(409, "outcome_conflict", message="another outcome was reported"))

    with pytest.raises(Refused) as refused:
        with ledger.claim("send-invoice", {}) as claim:
            claim.succeeded(external_id="rec-1")

    assert (refused.value.http_status, refused.value.status) == (409, "outcome_conflict")
    # The caller said it succeeded: the block's end reports unknown, not a failure to retry.
    assert [body["outcome"] for body in server.sent("outcome")] == ["succeeded", "unknown"]
    assert claim.reported == "unknown"


def test_a_refused_report_leaves_the_caller_s_exception_in_front(ledger, server):
    server.script("outcome", httpx.Response(422, json={"status": "blocked", "reason": "invalid_input", "errors": []}))

    with pytest.raises(VendorDown) as raised:
        with ledger.claim("send-invoice", {}):
            raise VendorDown("boom")

    assert any("could not be reported" in note for note in raised.value.__notes__)


@pytest.mark.parametrize("page", ["<html>ok</html>", ""])
def test_a_report_answered_200_by_a_proxy_s_page_is_not_recorded_but_sent_again(ledger, server, page):
    """A 200 that is not opsconsole's JSON (a proxy's page, an empty body) was taken as recorded: the
    report was dropped silently. It is the service failing: sent again until opsconsole answers."""
    server.script("outcome", httpx.Response(200, text=page, headers={"Content-Type": "text/html"}))

    with ledger.claim("send-invoice", {}) as claim:
        answer = claim.succeeded(external_id="rec-1")

    assert answer["status"] == "recorded"
    assert len(server.sent("outcome")) == 2


@pytest.mark.parametrize("status", [408, 429])
def test_a_proxy_s_408_or_429_on_a_report_is_retried(ledger, server, status):
    server.script("outcome", httpx.Response(status, text="<html>slow down</html>", headers={"Retry-After": "0"}))

    with ledger.claim("send-invoice", {}) as claim:
        answer = claim.succeeded(external_id="rec-1")

    assert answer["status"] == "recorded"
    assert len(server.sent("outcome")) == 2
