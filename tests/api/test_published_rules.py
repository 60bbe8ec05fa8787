"""The OpenAPI document states the rules the server enforces on what it is sent: a body the published
request schema refuses is the body the server refuses (422 ``invalid_input``), and one it accepts
the server takes past validation. Each rule is tried both ways, through the Django test client with
a workspace token, the document read as it is served."""

import itertools
import json

import jsonschema_rs
import pytest
from django.conf import settings

pytestmark = pytest.mark.django_db

KEY = "demo:INV-7:v1:send-invoice"
ABSENT = object()


@pytest.fixture
def document(client):
    return client.get("/api/v1/openapi.json").json()


def request_schema(document: dict, path: str) -> jsonschema_rs.Draft202012Validator:
    schema = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return jsonschema_rs.Draft202012Validator(schema | {"components": document["components"]}, validate_formats=True)


def refused_as_invalid(client, token, path: str, body: dict) -> bool:
    """Whether the server refuses ``body`` as invalid input (it answers otherwise, e.g. 404 for the
    key no claim holds, what it does not refuse)."""
    response = client.post(
        path, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert response.status_code < 500, response.content
    return response.status_code == 422 and response.json().get("reason") == "invalid_input"


def bodies(**choices) -> list[dict]:
    """Every combination of the values given for each field (``ABSENT``: the field left out)."""
    names = list(choices)
    return [
        {name: value for name, value in zip(names, values, strict=True) if value is not ABSENT}
        for values in itertools.product(*choices.values())
    ]


def disagreements(client, token, document, path: str, cases: list[dict]) -> list[dict]:
    schema = request_schema(document, path)
    return [
        {"body": body, "schema_valid": schema.is_valid(body)}
        for body in cases
        if schema.is_valid(body) == refused_as_invalid(client, token, path.replace("{key}", KEY), body)
    ]


def test_an_outcome_report_is_refused_by_the_document_exactly_when_the_server_refuses_it(client, token, document):
    """`category` is required exactly when `outcome` is `failed`; `external_id` and `result` are for
    `succeeded` only, `error` for the others, `retry_after` for a transient failure only."""
    cases = bodies(
        token=["t"],
        outcome=["succeeded", "failed", "unknown"],
        category=[ABSENT, None, "transient", "permanent"],
        external_id=[ABSENT, "X-1"],
        result=[ABSENT, None, {"n": 1}],
        error=[ABSENT, "timed out"],
        retry_after=[ABSENT, 30],
    )

    assert disagreements(client, token, document, "/api/v1/claims/{key}/outcome", cases) == []


def test_a_heartbeat_lease_is_refused_by_the_document_exactly_when_the_server_refuses_it(client, token, document):
    low, high = settings.OPSCONSOLE_CLAIM_LEASE_SECONDS_MIN, settings.OPSCONSOLE_CLAIM_LEASE_SECONDS_MAX
    cases = bodies(token=["t"], lease_seconds=[ABSENT, None, 0, low - 1, low, high, high + 1, -5])

    assert disagreements(client, token, document, "/api/v1/claims/{key}/heartbeat", cases) == []
    lease = document["paths"]["/api/v1/claims/{key}/heartbeat"]["post"]["requestBody"]["content"]["application/json"]
    assert f"{low} to {high}" in json.dumps(lease)


def test_the_document_states_the_rules_in_words_too(document):
    """What JSON Schema cannot state (a time relative to now), or states opaquely (``if``/``then``),
    the descriptions say."""
    schemas = document["components"]["schemas"]
    for envelope in ("PrepareBriefEvent", "Claim"):
        assert "within 10 years of now" in schemas[envelope]["properties"]["occurred_at"]["description"]
    outcome = document["paths"]["/api/v1/claims/{key}/outcome"]["post"]["requestBody"]["content"]["application/json"]
    category = outcome["schema"]["properties"]["category"]["description"]
    assert "Required when `outcome` is `failed`, and only then" in category
