"""The decorator form: a function that performs the action when the claim says so; its return value
is recorded as the success, its exception as the block's would be."""

import httpx
import pytest
from fake_claims import TOKEN, answer

from opsconsole_claims import Claim, Permanent


@pytest.fixture
def calls():
    return []


@pytest.fixture
def send_invoice(ledger, calls):
    @ledger.performs("send-invoice", lease_seconds=60)
    def send_invoice(data, claim):
        """Create the invoice at the vendor."""
        calls.append((data, claim.idempotency_key))
        return "rec-1", {"invoice": "INV-7", "amount_cents": data["amount_cents"]}

    return send_invoice


def test_it_performs_when_claimed_and_records_what_the_function_returned(send_invoice, server, calls):
    claim = send_invoice({"amount_cents": 100}, delivery_id="d-1")

    assert isinstance(claim, Claim)
    assert calls == [({"amount_cents": 100}, claim.idempotency_key)]
    assert (claim.status, claim.external_id, claim.result) == (
        "done",
        "rec-1",
        {"invoice": "INV-7", "amount_cents": 100},
    )
    assert server.sent("claim")[0] == {
        "action": "send-invoice",
        "data": {"amount_cents": 100},
        "lease_seconds": 60,
        "delivery_id": "d-1",
    }
    assert server.sent("outcome") == [
        {"token": TOKEN, "outcome": "succeeded", "external_id": "rec-1", "result": claim.result}
    ]


def test_a_function_may_return_the_result_alone(ledger, server):
    @ledger.performs("send-invoice")
    def send(data, claim):
        return {"invoice": "INV-8"}

    claim = send({})

    assert (claim.external_id, claim.result) == (None, {"invoice": "INV-8"})
    assert server.sent("outcome")[0] == {"token": TOKEN, "outcome": "succeeded", "result": {"invoice": "INV-8"}}


def test_it_does_not_call_the_function_when_the_claim_is_done_and_returns_the_recorded_result(
    send_invoice, server, calls
):
    server.script("claim", answer(200, "done", result={"invoice": "INV-7"}, external_id="rec-1"))

    claim = send_invoice({"amount_cents": 100})

    assert calls == []
    assert (claim.status, claim.result, claim.external_id) == ("done", {"invoice": "INV-7"}, "rec-1")
    assert server.sent("outcome") == []


def test_it_does_not_call_the_function_when_deferred(send_invoice, server, calls):
    server.script("claim", answer(409, "in_progress", retry_after=12))

    claim = send_invoice({"amount_cents": 100})

    assert calls == []
    assert (claim.status, claim.should_act, claim.retry_after) == ("in_progress", False, 12)


def test_an_exception_of_the_function_is_reported_and_raised(ledger, server):
    @ledger.performs("send-invoice", permanent=(LookupError,))
    def send(data, claim):
        raise KeyError("no such customer")

    with pytest.raises(KeyError):
        send({})

    assert [(b["outcome"], b["category"]) for b in server.sent("outcome")] == [("failed", "permanent")]


def test_an_exception_after_the_function_said_it_acted_reports_unknown(ledger, server):
    @ledger.performs("send-invoice")
    def send(data, claim):
        claim.acted()
        raise httpx.ReadTimeout("vendor did not answer")

    with pytest.raises(httpx.ReadTimeout):
        send({})

    assert [b["outcome"] for b in server.sent("outcome")] == ["unknown"]


def test_a_function_that_reports_itself_is_not_reported_twice(ledger, server):
    @ledger.performs("send-invoice")
    def send(data, claim):
        claim.failed(category="transient", error="vendor busy", retry_after=30)

    claim = send({})

    assert [b["outcome"] for b in server.sent("outcome")] == ["failed"]
    assert claim.status == "retry_later"


def test_a_return_value_it_cannot_record_reports_unknown_since_the_function_returned(ledger, server):
    @ledger.performs("send-invoice")
    def send(data, claim):
        return ("rec-1", {}, "extra")

    with pytest.raises(TypeError):
        send({})

    assert [b["outcome"] for b in server.sent("outcome")] == ["unknown"]


def test_a_function_that_returns_nothing_records_success_without_a_result(ledger, server):
    @ledger.performs("send-invoice")
    def send(data, claim):
        pass

    assert send({}).status == "done"
    assert server.sent("outcome") == [{"token": TOKEN, "outcome": "succeeded"}]


def test_the_decorated_function_keeps_its_name_and_doc(send_invoice):
    assert (send_invoice.__name__, send_invoice.__doc__) == ("send_invoice", "Create the invoice at the vendor.")


def test_permanent_raised_by_the_function_reports_permanent(ledger, server):
    @ledger.performs("send-invoice")
    def send(data, claim):
        raise Permanent("customer closed")

    with pytest.raises(Permanent):
        send({})

    assert server.sent("outcome")[0]["category"] == "permanent"
