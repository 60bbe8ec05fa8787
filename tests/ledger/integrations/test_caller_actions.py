"""Caller actions declared in an integrations file (``performed_by: caller``): no request, a lookup
and a listing at their destination, a claim lease and a service level of their own; each mistake
refused whole, saying where."""

from datetime import timedelta

import pytest
import yaml

from ledger.actions import get_action
from ledger.integrations import file
from ledger.models import HttpAction

DESTINATION = {
    "slug": "billing",
    "base_url": "https://billing.example.com/api",
    "idempotency_header": "Idempotency-Key",
}
CALLER_ACTION = {
    "name": "create-invoice",
    "destination": "billing",
    "performed_by": "caller",
    "claim_lease_seconds": 120,
    "service_level_seconds": 900,
    "schema": {
        "type": "object",
        "required": ["invoice_id", "amount_cents"],
        "properties": {"invoice_id": {"type": "string"}, "amount_cents": {"type": "integer"}},
    },
    "identity_fields": ["invoice_id"],
    "normalisers": {"invoice_id": "identifier"},
    "fingerprint_fields": ["invoice_id", "amount_cents"],
    "lookup": {"path": "/invoices?idempotency_key={{ key }}", "found": "data"},
}


def apply(**changes) -> list[str]:
    document = {"destinations": [DESTINATION], "http_actions": [CALLER_ACTION | changes]}
    return [str(change) for change in file.apply(document, actor="test")]


def problems(**changes) -> list[str]:
    with pytest.raises(file.IntegrationsError) as refused:
        apply(**changes)
    assert not HttpAction.objects.exists()
    return refused.value.problems


def test_a_files_caller_action_is_claimed_by_callers_with_its_lease_and_service_level(db):
    assert apply() == ["destination billing: created", "HTTP action create-invoice: created"]

    action = get_action("create-invoice")
    assert action.performed_by_caller
    assert (action.claim_lease, action.service_level) == (timedelta(seconds=120), timedelta(seconds=900))
    assert (action.definition["performed_by"], action.definition["claim_lease"]) == ("caller", 120)
    with pytest.raises(NotImplementedError, match="performed by its caller"):
        action.perform(None)


def test_a_longer_lease_is_a_new_version_and_a_service_level_is_not(db):
    apply()
    first = get_action("create-invoice").version

    apply(service_level_seconds=60)
    assert get_action("create-invoice").version == first
    apply(claim_lease_seconds=300)
    assert get_action("create-invoice").version != first


def test_no_service_level_is_no_promise(db):
    apply(service_level_seconds=None)

    assert get_action("create-invoice").service_level is None


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        (
            {"request": {"method": "POST", "path": "/invoices"}},
            "http_actions[0].request: a caller action declares no request: its caller claims each operation",
        ),
        ({"response": {"record_id": "id"}}, "http_actions[0].response: a caller action sends no request"),
        ({"lookup": {}}, "http_actions[0].lookup.path: required for a caller action: a GET by our key"),
        (
            {"lookup": {"repeat": True, "path": "/invoices?key={{ key }}"}},
            "http_actions[0].lookup.repeat: opsconsole never sends a caller action's request",
        ),
        ({"lookup": {"path": "/invoices?key={{ key.[ }}"}}, "http_actions[0].lookup.path"),
        ({"claim_lease_seconds": 4}, "http_actions[0].claim_lease_seconds: a whole number of seconds from 5 to 3600"),
        ({"claim_lease_seconds": 3601}, "http_actions[0].claim_lease_seconds: a whole number of seconds from 5 to"),
        ({"claim_lease_seconds": "1m"}, "http_actions[0].claim_lease_seconds: a number"),
        ({"service_level_seconds": 0}, "http_actions[0].service_level_seconds: more than 0"),
        ({"performed_by": "robot"}, "http_actions[0].performed_by: opsconsole (our workers send its request) or"),
    ],
)
def test_a_caller_action_that_would_not_work_is_refused_saying_where(db, changes, problem):
    found = problems(**changes)

    assert any(text.startswith(problem) for text in found), found


def test_an_action_our_workers_perform_still_needs_its_request(db):
    found = problems(performed_by="opsconsole")

    assert "http_actions[0].request.path: a path starting with /, e.g. /v1/charges" in found


def test_a_workers_action_has_a_service_level_too(db):
    request = {"method": "POST", "path": "/invoices", "body": {"id": "{{ data.invoice_id }}"}}
    apply(performed_by="opsconsole", request=request, service_level_seconds=300)

    action = get_action("create-invoice")
    assert (action.performed_by_caller, action.service_level) == (False, timedelta(seconds=300))


def test_an_export_holds_the_caller_fields_and_applies_back_unchanged(db):
    apply()

    exported = yaml.safe_load(file.export())

    [action] = exported["http_actions"]
    assert (action["performed_by"], action["claim_lease_seconds"], action["service_level_seconds"]) == (
        "caller",
        120,
        900,
    )
    assert action["request"] == {}
    assert file.apply(exported, actor="test") == []


def test_a_claim_of_an_action_our_workers_perform_is_refused_and_of_a_caller_action_claimed(api, db):
    request = {"method": "POST", "path": "/invoices", "body": {"id": "{{ data.invoice_id }}"}}
    apply(performed_by="opsconsole", request=request)
    body = {"action": "create-invoice", "data": {"invoice_id": "I-1", "amount_cents": 100}}

    refused = api.post("/api/v1/claims", body)

    assert refused.status_code == 422
    assert refused.json()["errors"] == [
        {
            "field": "action",
            "message": "create-invoice is performed by opsconsole's workers: submit it to /api/v1/events",
        }
    ]
    apply()
    assert api.post("/api/v1/claims", body).json()["status"] == "claimed"
