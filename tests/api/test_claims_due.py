"""``GET /api/v1/claims/due``: what a flow that polls may claim now, oldest first, a keyset page at a
time, of its token's workspace only; every bad parameter refused by name."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.core import accounts
from ledger.intake.submit import submit_event
from ledger.models import Attempt, Operation
from ledger.people.pause import set_paused
from reconciliation.reconcile import reconcile_operation
from tests.conftest import external_event

pytestmark = [pytest.mark.usefixtures("send_invoice_action")]  # the demo's caller action, from its file

INVOICE = {"request_id": "INV-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def invoice(request_id="INV-7", **data):
    return {"action": "send-invoice", "delivery_id": request_id, "data": INVOICE | {"request_id": request_id} | data}


def submitted(workspace, request_id, *, ago: timedelta = timedelta(0)) -> Operation:
    operation = submit_event(workspace=workspace, raw=invoice(request_id), source="api").operation
    Operation.objects.filter(pk=operation.pk).update(created_at=timezone.now() - ago)
    return operation


def due(api, **params):
    response = api.get("/api/v1/claims/due", data=params)
    assert response.status_code == 200, response.content
    return response.json()


def test_it_lists_what_may_be_claimed_oldest_first_with_what_to_claim_it_by(api, workspace):
    newer = submitted(workspace, "INV-2", ago=timedelta(minutes=1))
    older = submitted(workspace, "INV-1", ago=timedelta(minutes=5))

    body = due(api)

    assert body["status"] == "ok"
    assert [item["key"] for item in body["operations"]] == [older.key, newer.key]
    first = body["operations"][0]
    assert (first["action"], first["state"], first["attempts"]) == ("send-invoice", "pending", 0)
    assert first["summary"] == "INV-1 v1 · invoice in EUR"
    assert first["link"].endswith(f"/console/operations/{older.pk}/")
    assert body["next_cursor"] is None


def test_pages_follow_one_another_by_cursor_and_none_repeats(api, workspace):
    made = [submitted(workspace, f"INV-{n}", ago=timedelta(minutes=10 - n)) for n in range(5)]

    keys, cursor = [], None
    while True:
        body = due(api, limit=2, **({"cursor": cursor} if cursor else {}))
        keys += [item["key"] for item in body["operations"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert keys == [operation.key for operation in made]


def test_a_claimed_finished_paused_or_not_yet_due_operation_is_not_listed(api, workspace):
    claimed = submitted(workspace, "INV-1")
    api.post("/api/v1/claims", invoice("INV-1"))
    later = submitted(workspace, "INV-2")
    Operation.objects.filter(pk=later.pk).update(state="retrying", next_attempt_at=timezone.now() + timedelta(hours=1))
    listed = submitted(workspace, "INV-3")

    assert [item["key"] for item in due(api)["operations"]] == [listed.key]
    assert Operation.objects.get(pk=claimed.pk).state == "processing"
    set_paused(paused=True, reason="vendor down", workspace=workspace, action="send-invoice", actor="alice")
    assert due(api)["operations"] == []


def test_a_lookup_that_finds_nothing_makes_an_unknown_claim_due_again_until_it_is_claimed(api, workspace, standin):
    claimed = api.post("/api/v1/claims", invoice()).json()
    report = {"token": claimed["token"], "outcome": "unknown", "error": "connection reset"}
    api.post(f"/api/v1/claims/{claimed['key']}/outcome", report)
    assert due(api)["operations"] == []
    Attempt.objects.update(started_at=timezone.now() - timedelta(minutes=5))
    reconcile_operation(Operation.objects.get(), asked_by_person=True)

    [item] = due(api)["operations"]
    assert (item["key"], item["state"], item["attempts"]) == (claimed["key"], "retrying", 1)
    api.post("/api/v1/claims", invoice())
    assert due(api)["operations"] == []


def test_it_lists_one_action_when_asked(api, workspace):
    listed = submitted(workspace, "INV-1")

    assert [item["key"] for item in due(api, action="send-invoice")["operations"]] == [listed.key]


def test_another_workspaces_due_work_is_not_listed(api, workspace):
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    submitted(other, "INV-1")

    assert due(api)["operations"] == []


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "201"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "-1"}, "limit"),
        ({"limit": "1e3"}, "limit"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"cursor": "MjAyNi0wMS0wMXwx"}, "cursor"),  # another encoding
        ({"cursor": "2026-01-01T00:00:00_1"}, "cursor"),  # a time without its zone
        ({"cursor": "2026-01-01T00:00:00.000000Z_one"}, "cursor"),  # no id
        ({"action": "prepare-brief"}, "action"),  # performed by the workers
        ({"action": "no-such-action"}, "action"),
        ({"page": "2"}, "page"),
    ],
)
def test_a_bad_parameter_is_refused_naming_it(api, workspace, params, field):
    submitted(workspace, "INV-1")

    response = api.get("/api/v1/claims/due", data=params)

    assert response.status_code == 422
    body = response.json()
    assert (body["status"], body["reason"]) == ("blocked", "invalid_input")
    assert [error["field"] for error in body["errors"]] == [field]


def test_it_needs_a_token(client, db):
    assert client.get("/api/v1/claims/due").status_code == 401


def test_the_document_publishes_every_answer(client, db):
    route = client.get("/api/v1/openapi.json").json()["paths"]["/api/v1/claims/due"]["get"]

    assert set(route["responses"]) == {"200", "401", "403", "422", "503"}
    assert {parameter["name"] for parameter in route["parameters"]} == {"action", "limit", "cursor"}


# --- claiming what is due by its key -----------------------------------------------------------------


def test_due_work_is_claimed_by_its_key_and_the_claim_says_what_to_send(api, workspace):
    """A flow told of due work it never saw (an event from a webhook source, say) claims it by key."""
    listed = submitted(workspace, "INV-1")
    [item] = due(api)["operations"]

    response = api.post("/api/v1/claims", {"key": item["key"], "lease_seconds": 30})

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["status"], body["key"], body["attempt"]) == ("claimed", listed.key, 1)
    assert body["data"] == INVOICE | {"request_id": "INV-1"}
    assert body["idempotency_key"] == listed.key
    assert due(api)["operations"] == []


def test_a_claim_by_key_answers_as_any_claim_of_that_operation(api, workspace):
    listed = submitted(workspace, "INV-1")
    api.post("/api/v1/claims", {"key": listed.key})

    again = api.post("/api/v1/claims", {"key": listed.key})

    assert again.status_code == 409
    assert again.json()["status"] == "in_progress"


def test_a_claim_by_a_key_of_no_operation_of_the_workspace_is_not_found_and_reserves_nothing(api, workspace):
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    elsewhere = submitted(other, "INV-1")

    for key in ("demo:nothing:v1:send-invoice", elsewhere.key):
        response = api.post("/api/v1/claims", {"key": key})
        assert response.status_code == 404
    assert Operation.objects.filter(workspace=workspace).count() == 0
    assert Operation.objects.get(pk=elsewhere.pk).state == "pending"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"key": 7}, "key"),
        ({"key": ""}, "key"),
        ({"key": "k", "lease_seconds": 1}, "lease_seconds"),
        ({"key": "k", "data": {}}, "data"),
        ({"key": "demo:\u0000:v1:send-invoice"}, "key"),
        ({"key": "demo:\ud800:v1:send-invoice"}, "key"),
        ({"key": "k", "a\u0000b": 1}, "ab"),
    ],
)
def test_a_bad_claim_by_key_is_refused_naming_the_field(api, workspace, body, field):
    if body["key"] == "k":
        body["key"] = submitted(workspace, "INV-1").key

    response = api.post("/api/v1/claims", body)

    assert response.status_code == 422, response.content
    assert [error["field"] for error in response.json()["errors"]] == [field]


def test_a_workers_operation_is_not_claimed_by_its_key(api, workspace, standin):
    operation = submit_event(workspace=workspace, raw=external_event(), source="api").operation

    response = api.post("/api/v1/claims", {"key": operation.key})

    assert response.status_code == 422
    assert "not an action its caller performs" in response.json()["errors"][0]["message"]
    assert Operation.objects.get(pk=operation.pk).state == "pending"
