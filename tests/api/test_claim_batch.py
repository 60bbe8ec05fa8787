"""`POST /api/v1/claims/batch` (docs/claims.md): up to N claims in one request and one transaction,
each answered as `POST /claims` would answer it alone, with its index and status; oversized and
malformed batches refused as `/events/batch` refuses them."""

import pytest

from ledger.models import Attempt, AuditEvent, Delivery, Operation
from ledger.people.pause import set_paused
from opsconsole.api import endpoints

INVOICE = {"request_id": "INV-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def envelope(request_id="INV-7", **data):
    return {"action": "send-invoice", "data": INVOICE | {"request_id": request_id} | data}


@pytest.fixture
def batch(api, send_invoice_action):
    def post(items, **extra):
        return api.post("/api/v1/claims/batch", {"claims": items}, **extra)

    return post


def test_each_claim_of_a_batch_is_claimed_with_its_own_token_in_one_transaction(batch, api):
    response = batch([envelope("INV-1"), envelope("INV-2") | {"lease_seconds": 30}])

    assert response.status_code == 200
    results = response.json()["results"]
    assert [(r["index"], r["http_status"], r["status"]) for r in results] == [
        (0, 201, "claimed"),
        (1, 201, "claimed"),
    ]
    assert results[0]["token"] != results[1]["token"]
    assert Operation.objects.filter(state="processing").count() == 2
    assert Attempt.objects.count() == 2
    # Each token is the claim's own: its outcome is recorded under it.
    report = {"token": results[1]["token"], "outcome": "succeeded", "external_id": "in_2", "result": {}}
    recorded = api.post(f"/api/v1/claims/{results[1]['key']}/outcome", report)
    assert recorded.json()["status"] == "recorded"


def test_what_a_claim_creates_and_claims_bears_one_time(batch, api):
    """The reservation inside the claim's call is made at the claim's time: an operation is never
    updated before it was created, and its delivery, audit events and try agree."""
    batch([envelope("INV-1")])
    api.post("/api/v1/claims", envelope("INV-2"))

    for operation in Operation.objects.all():
        attempt = Attempt.objects.get(operation=operation)
        delivery = Delivery.objects.get(operation=operation)
        assert operation.created_at == operation.updated_at == attempt.started_at == delivery.received_at
        assert {event.created_at for event in AuditEvent.objects.filter(operation=operation)} == {operation.created_at}


def test_a_key_twice_in_a_batch_is_claimed_by_its_first_item_and_the_second_told_in_progress(batch):
    results = batch([envelope(), envelope()]).json()["results"]

    assert [(r["http_status"], r["status"]) for r in results] == [(201, "claimed"), (409, "in_progress")]
    assert results[1]["retry_after"] >= 1
    assert Operation.objects.get().fencing_token == 1
    assert [d.outcome for d in Delivery.objects.order_by("id")] == ["accepted", "duplicate"]


def test_every_answer_of_the_single_route_is_given_per_item(batch, api):
    """done, in progress, held, not found, a payload conflict and an invalid claim, side by side."""
    done = api.post("/api/v1/claims", envelope("INV-1")).json()
    api.post(
        f"/api/v1/claims/{done['key']}/outcome",
        {"token": done["token"], "outcome": "succeeded", "external_id": "in_1", "result": {"id": "in_1"}},
    )
    api.post("/api/v1/claims", envelope("INV-2"))

    results = batch(
        [
            envelope("INV-1"),
            envelope("INV-2"),
            {"key": "demo:nothing:v1:send-invoice"},
            envelope("INV-2", amount_cents=1),
            {"action": "send-invoice", "data": {"request_id": "INV-3"}},
            "not a claim",
            {"key": done["key"], "lease_seconds": 30},
        ]
    ).json()["results"]

    assert [(r["http_status"], r["status"]) for r in results] == [
        (200, "done"),
        (409, "in_progress"),
        (404, "not_found"),
        (409, "blocked"),
        (422, "blocked"),
        (422, "blocked"),
        (200, "done"),
    ]
    assert results[0]["result"] == {"id": "in_1"}
    assert results[3]["reason"] == "payload_conflict"
    assert results[4]["reason"] == results[5]["reason"] == "invalid_input"


def test_a_paused_action_is_answered_held_for_each_claim(batch):
    set_paused(paused=True, actor="ops", reason="vendor outage", action="send-invoice")

    results = batch([envelope("INV-1"), envelope("INV-2")]).json()["results"]

    assert [(r["http_status"], r["status"], r["reason"]) for r in results] == [(423, "held", "vendor outage")] * 2
    assert not Attempt.objects.exists()


def test_claims_by_key_are_claimed_in_the_batch(batch, api):
    keys = [api.post("/api/v1/events", envelope(f"INV-{n}")).json()["key"] for n in (1, 2)]

    results = batch([{"key": keys[1]}, {"key": keys[0], "lease_seconds": 60}]).json()["results"]

    assert [(r["status"], r["key"]) for r in results] == [("claimed", keys[1]), ("claimed", keys[0])]
    assert results[0]["data"]["request_id"] == "INV-2"


def test_a_batch_over_the_limit_is_refused_whole_and_recorded_nowhere(batch, monkeypatch):
    monkeypatch.setattr(endpoints, "MAX_CLAIM_BATCH", 2)

    response = batch([envelope("INV-1"), envelope("INV-2"), envelope("INV-3")])

    assert response.status_code == 413
    body = response.json()
    assert (body["status"], body["reason"], body["limit"]) == ("blocked", "batch_too_large", 2)
    assert body["errors"] == [{"field": "claims", "message": "at most 2 claims per batch"}]
    assert not Delivery.objects.exists()
    assert not Operation.objects.exists()


@pytest.mark.parametrize("body", [{"claims": "no"}, {"events": []}, ["a list"]])
def test_a_batch_without_a_list_of_claims_is_refused_and_recorded(api, send_invoice_action, body):
    response = api.post("/api/v1/claims/batch", body)

    assert response.status_code == 422
    assert response.json()["errors"] == [{"field": "claims", "message": "must be a list of claims"}]
    assert Delivery.objects.get().outcome == "invalid"


def test_a_claim_larger_than_a_single_claims_limit_is_refused_on_its_own(batch, settings):
    settings.OPSCONSOLE_MAX_BODY_BYTES = 400

    results = batch([envelope("INV-1"), envelope("INV-2", note="x" * 500)]).json()["results"]

    assert [(r["http_status"], r["status"]) for r in results] == [(201, "claimed"), (413, "blocked")]
    assert results[1]["reason"] == "too_large"


def test_an_empty_batch_is_answered_with_no_results(batch):
    before = AuditEvent.objects.count()  # the token's issue

    assert batch([]).json() == {"results": []}
    assert AuditEvent.objects.count() == before


def test_a_claim_after_an_item_that_claimed_nothing_begins_under_the_stored_configuration(batch, api):
    """The configuration is sent with the first item that names it only: stored by it whatever it
    is answered, so the later item's Attempt finds it."""
    api.post("/api/v1/claims", envelope("INV-1"))

    results = batch([envelope("INV-1"), envelope("INV-2")]).json()["results"]

    assert [r["status"] for r in results] == ["in_progress", "claimed"]
    attempt = Attempt.objects.get(operation__key=results[1]["key"])
    assert attempt.config_version_id == Attempt.objects.get(operation__key=results[0]["key"]).config_version_id


def test_a_batch_whose_first_claim_is_a_payload_conflict_still_stores_the_configuration_the_next_claims(batch, api):
    """The configuration a try begins under is sent with the first claim of its action in the
    request only; a first claim refused as a payload conflict stores it too, so the next claim's
    Attempt finds it (none was stored before: nothing of the action has run)."""
    assert api.post("/api/v1/events", envelope("INV-1")).status_code == 201

    results = batch([envelope("INV-1", amount_cents=9900), envelope("INV-2")]).json()["results"]

    assert [(r["http_status"], r["status"]) for r in results] == [(409, "blocked"), (201, "claimed")]
    assert Attempt.objects.get().config_version_id is not None
