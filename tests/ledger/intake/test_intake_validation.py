"""Bad input is refused with an error naming the field, and its arrival is still recorded."""

import json

import pytest
from django.test import override_settings

from ledger.models import AuditEvent, Delivery, Operation
from tests.conftest import R42, event

PRIVATE_TITLE = "Confidential: renegotiate the Acme renewal"


def brief(delivery_id="delivery-1", **data):
    """The R-42 event with a private title, so a leak of submitted values into errors would show."""
    return event(delivery_id, **({"title": PRIVATE_TITLE} | data))


def without(field):
    body = brief()
    del body["data"][field]
    return body


def submitted_values(body) -> set[str]:
    """The distinctive text of what was submitted (short values such as '3' or 'ops' are skipped)."""
    found = set()

    def walk(value):
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str | int | float) and not isinstance(value, bool) and len(str(value).strip()) >= 4:
            found.add(str(value))

    walk(body.get("data") if isinstance(body, dict) else body)
    return found


INVALID = {
    "request_id missing": (without("request_id"), "data.request_id"),
    "request_id blank": (brief(request_id=""), "data.request_id"),
    "request_id white space": (brief(request_id="   "), "data.request_id"),
    "request_id a number": (brief(request_id=424242), "data.request_id"),
    "request_id null": (brief(request_id=None), "data.request_id"),
    "version missing": (without("version"), "data.version"),
    "version zero": (brief(version=0), "data.version"),
    "version negative": (brief(version=-1), "data.version"),
    "version a boolean": (brief(version=True), "data.version"),
    "version a float": (brief(version=3.5), "data.version"),
    "version a whole float": (brief(version=3.0), "data.version"),
    "version a string": (brief(version="3"), "data.version"),
    "title missing": (without("title"), "data.title"),
    "title blank": (brief(title=""), "data.title"),
    "title white space": (brief(title=" \t\n "), "data.title"),
    "title a number": (brief(title=12345), "data.title"),
    "owner not approved": (brief(owner="intruder-finance"), "data.owner"),
    "owner missing": (without("owner"), "data.owner"),
    "owner blank": (brief(owner=""), "data.owner"),
    "extra field in data": (brief(secret_note="private note about the merger"), "data.secret_note"),
    "unknown action": (brief() | {"action": "launch-rockets"}, "action"),
    "missing action": ({k: v for k, v in brief().items() if k != "action"}, "action"),
    "action not a string": (brief() | {"action": 7}, "action"),
    "missing data": ({k: v for k, v in brief().items() if k != "data"}, "data"),
    "data not an object": (brief() | {"data": ["R-42", 3]}, "data"),
    "extra field in the envelope": (brief() | {"priority": "urgent"}, "priority"),
    "delivery_id not a string": (brief() | {"delivery_id": 99}, "delivery_id"),
    "occurred_at not a time": (brief() | {"occurred_at": "yesterday"}, "occurred_at"),
    "occurred_at without a time zone": (brief() | {"occurred_at": "2026-11-29T10:00:00"}, "occurred_at"),
    "envelope a list": ([brief()], "body"),
    "envelope a string": ("prepare-brief R-42", "body"),
    "envelope null": (None, "body"),
}


@pytest.mark.parametrize(("body", "field"), INVALID.values(), ids=INVALID.keys())
def test_it_refuses_an_invalid_event_naming_the_field_and_records_the_delivery(api, body, field):
    response = api.post("/api/v1/events", json.dumps(body))

    assert response.status_code == 422, response.json()
    answer = response.json()
    assert answer["status"] == "blocked"
    assert answer["reason"] == "invalid_input"
    assert field in [error["field"] for error in answer["errors"]], answer["errors"]
    assert all(error["message"] for error in answer["errors"])

    delivery = Delivery.objects.get()
    assert delivery.outcome == Delivery.Outcome.INVALID
    assert delivery.operation is None
    assert delivery.errors == answer["errors"]
    assert Operation.objects.count() == 0


@pytest.mark.parametrize(("body", "field"), INVALID.values(), ids=INVALID.keys())
def test_it_keeps_submitted_values_out_of_the_errors(api, body, field):
    """Errors name the field and the rule, never the submitted content (it may be private)."""
    response = api.post("/api/v1/events", json.dumps(body))

    recorded = json.dumps(Delivery.objects.get().errors)
    answered = json.dumps(response.json())
    for value in submitted_values(body):
        assert value not in recorded, f"{value!r} leaked into the recorded errors"
        assert value not in answered, f"{value!r} leaked into the response"


def test_it_reports_every_invalid_field_at_once(api):
    response = api.post("/api/v1/events", brief(request_id=" ", version=0, title="", owner="nobody"))
    fields = {error["field"] for error in response.json()["errors"]}
    assert {"data.request_id", "data.version", "data.title"} <= fields


def test_it_records_the_transport_labels_of_an_invalid_delivery(api):
    api.post("/api/v1/events", brief("delivery-77", version=0) | {"correlation_id": "run-5"})
    delivery = Delivery.objects.get()
    assert (delivery.sender_delivery_id, delivery.correlation_id, delivery.action) == (
        "delivery-77",
        "run-5",
        "prepare-brief",
    )
    assert delivery.key == ""
    assert delivery.source == Delivery.Source.API


def test_it_writes_no_audit_event_about_an_operation_for_invalid_input(api):
    before = AuditEvent.objects.count()
    api.post("/api/v1/events", brief(version=0))
    assert AuditEvent.objects.filter(operation__isnull=False).count() == 0
    assert AuditEvent.objects.count() == before


def test_it_accepts_the_valid_event_the_invalid_ones_are_made_from(api):
    """Guards the table above: each case is invalid because of its one change, not the base."""
    response = api.post("/api/v1/events", brief())
    assert response.status_code == 201, response.json()


@pytest.mark.parametrize("body", ["{not json", '{"action": "prepare-brief",', "", "\xff\xfe"])
def test_it_answers_malformed_json_with_400_and_records_it(api, body):
    # Django's test client drops the Content-Type of an empty body; a client that sends one is meant.
    response = api.post("/api/v1/events", body.encode("latin-1"), CONTENT_TYPE="application/json")

    assert response.status_code == 400
    assert response.json()["status"] == "blocked"
    assert response.json()["reason"] == "malformed_json"
    delivery = Delivery.objects.get()
    assert delivery.outcome == Delivery.Outcome.INVALID
    assert delivery.operation is None
    assert [error["field"] for error in delivery.errors] == ["body"]


def test_it_answers_401_without_a_token_and_records_nothing(client, workspace):
    response = client.post("/api/v1/events", event(), content_type="application/json")
    assert response.status_code == 401
    assert Delivery.objects.count() == 0
    assert Operation.objects.count() == 0


@pytest.mark.parametrize("authorization", ["Bearer oc_not-a-real-token", "Bearer ", "Basic b3BzOm9wcw==", "oc_x"])
def test_it_answers_401_with_a_bad_token_and_records_nothing(client, workspace, authorization):
    response = client.post("/api/v1/events", event(), content_type="application/json", HTTP_AUTHORIZATION=authorization)
    assert response.status_code == 401
    assert Delivery.objects.count() == 0


def test_it_answers_401_for_a_revoked_token(client, workspace, token):
    workspace.tokens.update(revoked_at="2026-01-01T00:00:00Z")
    response = client.post(
        "/api/v1/events", event(), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert response.status_code == 401
    assert Delivery.objects.count() == 0


@override_settings(OPSCONSOLE_MAX_BODY_BYTES=200)
def test_it_answers_413_over_the_body_limit_and_records_it(api):
    body = json.dumps(brief(title="x" * 300))
    assert len(body) > 200

    response = api.post("/api/v1/events", body)

    assert response.status_code == 413
    assert response.json()["status"] == "blocked"
    assert response.json()["reason"] == "too_large"
    delivery = Delivery.objects.get()
    assert delivery.outcome == Delivery.Outcome.INVALID
    assert Operation.objects.count() == 0


@override_settings(OPSCONSOLE_MAX_BODY_BYTES=200)
def test_it_accepts_a_body_within_the_limit(api):
    body = json.dumps({"action": "prepare-brief", "data": R42})
    assert len(body) <= 200
    assert api.post("/api/v1/events", body).status_code == 201


def test_it_defaults_the_body_limit_to_64_kib(settings):
    assert settings.OPSCONSOLE_MAX_BODY_BYTES == 64 * 1024


def test_it_stores_the_title_trimmed_and_treats_padding_as_the_same_payload(api):
    padded = api.post("/api/v1/events", event("delivery-1", title="  Review renewal options \n"))
    plain = api.post("/api/v1/events", event("delivery-2"))

    assert padded.status_code == 201
    assert Operation.objects.get().payload["title"] == "Review renewal options"
    assert plain.status_code == 200
    assert plain.json()["status"] == "duplicate"


NUL_CASES = {
    "in the title": (brief(title="Review\x00renewal"), "data.title"),
    "in the request id": (brief(request_id="R-\x0042"), "data.request_id"),
    "in the owner": (brief(owner="o\x00ps"), "data.owner"),
    "in the delivery id": (brief() | {"delivery_id": "delivery\x00-1"}, "delivery_id"),
    "in a field name": (brief() | {"data": R42 | {"no\x00te": "x"}}, "data.no\\u0000te"),
    "in the action": (brief() | {"action": "prepare\x00brief"}, "action"),
}


@pytest.mark.parametrize(("body", "field"), NUL_CASES.values(), ids=NUL_CASES.keys())
def test_it_refuses_a_nul_character_as_invalid_input(api, body, field):
    """PostgreSQL stores no NUL in text or jsonb: refused as a 422 naming the field, never a 500."""
    response = api.post("/api/v1/events", json.dumps(body))

    assert response.status_code == 422, response.content
    assert [error["field"] for error in response.json()["errors"]] == [field]
    delivery = Delivery.objects.get()
    assert delivery.outcome == Delivery.Outcome.INVALID
    assert "\x00" not in delivery.sender_delivery_id + delivery.action + json.dumps(delivery.errors)
    assert Operation.objects.count() == 0


@pytest.mark.parametrize("path", ["/api/v1/events", "/api/v1/events/batch"])
def test_it_answers_json_nested_too_deeply_as_malformed(api, path):
    """Deeper than Python's JSON decoder goes: a recorded 400, not a RecursionError."""
    nested = "[" * 5000 + "]" * 5000
    response = api.post(path, '{"action": "prepare-brief", "data": {"x": ' + nested + "}}")

    assert response.status_code == 400
    assert response.json()["reason"] == "malformed_json"
    assert Delivery.objects.get().outcome == Delivery.Outcome.INVALID


def test_it_records_when_the_sender_says_the_event_happened(api):
    api.post("/api/v1/events", brief() | {"occurred_at": "2026-11-29T10:00:00+01:00"})
    assert Delivery.objects.get().occurred_at.isoformat() == "2026-11-29T09:00:00+00:00"
