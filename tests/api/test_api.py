"""The HTTP API beyond the single event: batches, reading an operation, the schema, the worker nudge."""

import pytest
from django.test import override_settings
from django_q.models import OrmQ

from ledger.actions import registry
from ledger.core import accounts, nudges
from ledger.core.nudges import PROCESS
from ledger.models import Delivery, Operation, Wakeup
from tests.conftest import event

OPERATION_FIELDS = {
    "id",
    "key",
    "workspace",
    "action",
    "state",
    "attempts",
    "payload",
    "result",
    "external_id",
    "last_error",
    "correlation_id",
    "created_at",
    "updated_at",
}
# What the operation page adds to the operation as every answer shows it.
PAGE_FIELDS = {"fingerprint", "summary", "assigned_to", "tries", "deliveries", "conflicts", "decisions", "audit"}


# --- batches --------------------------------------------------------------------------------------


def test_it_answers_each_event_of_a_batch_on_its_own(api):
    """One bad event blocks no other: each gets its own result, index and HTTP status."""
    events = [
        event("delivery-1"),
        event("delivery-2", version=0),
        event("delivery-3"),
        event("delivery-4", title="Changed without a new version"),
        "not an event",
        event("delivery-6", version=4),
    ]

    response = api.post("/api/v1/events/batch", {"events": events})

    assert response.status_code == 200
    results = response.json()["results"]
    assert [(r["index"], r["http_status"], r["status"]) for r in results] == [
        (0, 201, "accepted"),
        (1, 422, "blocked"),
        (2, 200, "duplicate"),
        (3, 409, "blocked"),
        (4, 422, "blocked"),
        (5, 201, "accepted"),
    ]
    assert results[1]["reason"] == "invalid_input"
    assert [e["field"] for e in results[1]["errors"]] == ["data.version"]
    assert results[3]["reason"] == "payload_conflict"
    assert results[2]["operation"]["id"] == results[0]["operation"]["id"]
    assert Operation.objects.count() == 2
    assert sorted(Delivery.objects.values_list("outcome", flat=True)) == sorted(
        ["accepted", "invalid", "duplicate", "conflict", "invalid", "accepted"]
    )


def test_it_gives_a_batch_item_the_same_body_as_a_single_event(api):
    single = api.post("/api/v1/events", event("delivery-1")).json()
    batched = api.post("/api/v1/events/batch", {"events": [event("delivery-2")]}).json()["results"][0]
    assert batched.pop("index") == 0
    assert batched.pop("http_status") == 200
    single["status"] = "duplicate"
    assert batched == single


@override_settings(OPSCONSOLE_MAX_BATCH=3)
def test_it_refuses_a_batch_over_the_limit_whole_and_records_nothing(api):
    response = api.post("/api/v1/events/batch", {"events": [event(f"delivery-{i}") for i in range(4)]})

    assert response.status_code == 413
    assert response.json()["status"] == "blocked"
    assert response.json()["reason"] == "batch_too_large"
    assert Delivery.objects.count() == 0
    assert Operation.objects.count() == 0


@override_settings(OPSCONSOLE_MAX_BATCH=3)
def test_it_takes_a_batch_at_the_limit(api):
    response = api.post("/api/v1/events/batch", {"events": [event(f"delivery-{i}") for i in range(3)]})
    assert response.status_code == 200
    assert [r["status"] for r in response.json()["results"]] == ["accepted", "duplicate", "duplicate"]


def test_it_defaults_the_batch_limit_to_500(settings):
    assert settings.OPSCONSOLE_MAX_BATCH == 500


@pytest.mark.parametrize("body", [{"events": {"0": event()}}, {"events": None}, {}, [event()]])
def test_it_answers_422_when_events_is_not_a_list(api, body):
    response = api.post("/api/v1/events/batch", body)

    assert response.status_code == 422
    assert response.json()["reason"] == "invalid_input"
    assert [e["field"] for e in response.json()["errors"]] == ["events"]
    assert Operation.objects.count() == 0
    assert Delivery.objects.get().outcome == Delivery.Outcome.INVALID


def test_it_answers_malformed_json_in_a_batch_with_400(api):
    response = api.post("/api/v1/events/batch", '{"events": [')
    assert response.status_code == 400
    assert response.json()["reason"] == "malformed_json"


def test_it_requires_a_token_for_a_batch(client, workspace):
    response = client.post("/api/v1/events/batch", {"events": [event()]}, content_type="application/json")
    assert response.status_code == 401
    assert Delivery.objects.count() == 0


@override_settings(OPSCONSOLE_MAX_BODY_BYTES=200)
def test_it_holds_each_batch_item_to_the_single_event_limit(api):
    response = api.post("/api/v1/events/batch", {"events": [event("delivery-1", title="x" * 300), event()]})
    results = response.json()["results"]
    assert [(r["http_status"], r.get("reason")) for r in results] == [(413, "too_large"), (201, None)]


# --- reading an operation -------------------------------------------------------------------------


def test_it_returns_an_operation_by_key(api):
    accepted = api.post("/api/v1/events", event() | {"correlation_id": "run-7"}).json()

    response = api.get("/api/v1/operations/demo:R-42:v3:prepare-brief")

    assert response.status_code == 200
    assert {name: response.json()[name] for name in accepted["operation"]} == accepted["operation"]
    assert response.json()["correlation_id"] == "run-7"


def test_it_describes_an_operation_with_exactly_the_documented_fields(api):
    api.post("/api/v1/events", event())
    operation = api.get("/api/v1/operations/demo:R-42:v3:prepare-brief").json()

    # The operation page adds its fingerprint, summary and holder, and its history.
    assert set(operation) == OPERATION_FIELDS | PAGE_FIELDS
    stored = Operation.objects.get()
    assert operation["id"] == stored.pk
    assert operation["key"] == "demo:R-42:v3:prepare-brief"
    assert operation["workspace"] == "demo"
    assert operation["action"] == "prepare-brief"
    assert operation["state"] == "pending"
    assert operation["attempts"] == 0
    assert operation["result"] is None
    assert operation["external_id"] == ""
    assert operation["last_error"] is None
    assert operation["created_at"] == stored.created_at.isoformat()
    assert operation["updated_at"] == stored.updated_at.isoformat()


def test_it_shows_the_last_error_as_category_and_message(api):
    api.post("/api/v1/events", event())
    Operation.objects.update(last_error_category="transient", last_error_message="HTTP 503 from the destination")
    operation = api.get("/api/v1/operations/demo:R-42:v3:prepare-brief").json()
    assert operation["last_error"] == {"category": "transient", "message": "HTTP 503 from the destination"}


def test_it_finds_an_operation_whose_key_holds_an_encoded_colon(api):
    """The key of request 'R:1' is 'demo:R%3A1:v3:prepare-brief'; the URL encodes its '%' once more."""
    accepted = api.post("/api/v1/events", event(request_id="R:1")).json()
    assert accepted["key"] == "demo:R%3A1:v3:prepare-brief"

    response = api.get("/api/v1/operations/demo:R%253A1:v3:prepare-brief")

    assert response.status_code == 200
    assert response.json()["key"] == "demo:R%3A1:v3:prepare-brief"


def test_it_answers_404_for_an_unknown_key(api):
    api.post("/api/v1/events", event())
    response = api.get("/api/v1/operations/demo:R-42:v9:prepare-brief")
    assert response.status_code == 404
    assert response.json()["status"] == "not_found"


def test_it_answers_404_for_a_key_of_another_workspace(api, client):
    """A token sees its own workspace only, even when it knows another workspace's key."""
    other, other_token = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    client.post("/api/v1/events", event(), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {other_token}")
    assert Operation.objects.filter(workspace=other, key="other:R-42:v3:prepare-brief").exists()

    assert api.get("/api/v1/operations/other:R-42:v3:prepare-brief").status_code == 404


def test_it_requires_a_token_to_read_an_operation(api, client):
    api.post("/api/v1/events", event())
    assert client.get("/api/v1/operations/demo:R-42:v3:prepare-brief").status_code == 401


# --- the schema -----------------------------------------------------------------------------------


def test_it_publishes_an_openapi_schema_with_every_path(client):
    response = client.get("/api/v1/openapi.json")

    assert response.status_code == 200
    paths = response.json()["paths"]
    assert set(paths) == {
        "/api/v1/events",
        "/api/v1/events/batch",
        "/api/v1/operations/{key}",
        "/api/v1/claims",
        "/api/v1/claims/batch",
        "/api/v1/claims/due",
        "/api/v1/claims/{key}/heartbeat",
        "/api/v1/claims/{key}/outcome",
        "/api/v1/hooks/{source}",
        # The management routes (docs/api-for-flows.md).
        "/api/v1/operations",
        *[f"/api/v1/operations/{{key}}/{verb}" for verb in ["approve", "reject", "replay", "resolve", "cancel"]],
        "/api/v1/operations/{key}/take",
        "/api/v1/operations/{key}/release",
        "/api/v1/conflicts/{conflict_id}/apply",
        "/api/v1/conflicts/{conflict_id}/dismiss",
        "/api/v1/pauses",
        "/api/v1/pauses/{pause_id}",
    }
    assert "post" in paths["/api/v1/events"]
    assert "post" in paths["/api/v1/events/batch"]
    assert "get" in paths["/api/v1/operations/{key}"]
    assert all("post" in paths[path] for path in paths if path.startswith("/api/v1/claims") and "due" not in path)
    assert "get" in paths["/api/v1/claims/due"]


def test_it_publishes_each_actions_envelope_with_its_data_schema(client):
    """The body of POST /events is one of the registered actions' envelopes, told apart by
    `action`; each envelope's `data` is exactly that action's pydantic schema."""
    document = client.get("/api/v1/openapi.json").json()
    components = document["components"]["schemas"]
    body = document["paths"]["/api/v1/events"]["post"]["requestBody"]["content"]["application/json"]["schema"]

    mapping = body["discriminator"]["mapping"]
    assert body["discriminator"]["propertyName"] == "action"
    submittable = {name: action for name, action in registry.items() if action.submittable}
    assert set(mapping) == set(submittable)
    assert sorted(ref["$ref"] for ref in body["oneOf"]) == sorted(mapping.values())
    for name, action in submittable.items():
        envelope = components[mapping[name].rsplit("/", 1)[1]]
        assert envelope["properties"]["action"]["const"] == name
        assert envelope["required"] == ["action", "data"]
        assert envelope["additionalProperties"] is False
        data = components[envelope["properties"]["data"]["$ref"].rsplit("/", 1)[1]]
        assert data == action.schema.model_json_schema()
    batch = document["paths"]["/api/v1/events/batch"]["post"]["requestBody"]["content"]["application/json"]
    assert batch["schema"]["properties"]["events"]["items"]["anyOf"][0] == body


# What every decision route may refuse: the request (400, 413, 415, 422), the token (401, 403), what
# it names (404), its state (409), the database (503).
DECISION_REFUSALS = {"400", "401", "403", "404", "409", "413", "415", "422", "503"}


@pytest.mark.parametrize(
    ("path", "method", "statuses"),
    [
        ("/api/v1/events", "post", {"200", "201", "400", "401", "403", "409", "413", "415", "422", "503"}),
        ("/api/v1/events/batch", "post", {"200", "400", "401", "403", "413", "415", "422", "503"}),
        ("/api/v1/operations/{key}", "get", {"200", "401", "403", "404", "503"}),
        ("/api/v1/operations", "get", {"200", "401", "403", "422", "503"}),
        ("/api/v1/pauses", "get", {"200", "401", "403", "503"}),
        *[
            (f"/api/v1/operations/{{key}}/{verb}", "post", {"200", *DECISION_REFUSALS})
            for verb in ["approve", "reject", "replay", "resolve", "cancel", "take"]
        ],
        ("/api/v1/conflicts/{conflict_id}/apply", "post", {"200", *DECISION_REFUSALS}),
        ("/api/v1/conflicts/{conflict_id}/dismiss", "post", {"200", *DECISION_REFUSALS}),
        # No body (release, resume), or nothing it names and no state in the way (a new pause).
        ("/api/v1/operations/{key}/release", "post", {"200", "401", "403", "404", "503"}),
        ("/api/v1/pauses", "post", {"201", "400", "401", "403", "413", "415", "422", "503"}),
        ("/api/v1/pauses/{pause_id}", "delete", {"200", "401", "403", "404", "503"}),
    ],
)
def test_it_documents_every_status_an_endpoint_answers_with_its_body(client, path, method, statuses):
    """Each status an endpoint answers is in the document with the schema of its body; the 503 of
    an unreachable database also says when to retry."""
    document = client.get("/api/v1/openapi.json").json()
    responses = document["paths"][path][method]["responses"]

    assert set(responses) == statuses
    for status, answer in responses.items():
        schema = answer["content"]["application/json"]["schema"]
        for ref in [one["$ref"] for one in schema["anyOf"]] if "anyOf" in schema else [schema["$ref"]]:
            assert ref.rsplit("/", 1)[1] in document["components"]["schemas"], status
    assert "Retry-After" in responses["503"]["headers"]


def test_it_documents_a_batch_result_for_each_status_an_event_can_have(client):
    """Accepted, duplicate, conflict, stale, invalid, too large, and the unexpected failure (500)
    that an event of a batch answers alone."""
    components = client.get("/api/v1/openapi.json").json()["components"]["schemas"]
    results = components["BatchAnswer"]["properties"]["results"]["items"]["anyOf"]

    statuses = sorted(
        components[ref["$ref"].rsplit("/", 1)[1]]["properties"]["http_status"]["const"] for ref in results
    )
    assert statuses == [200, 201, 409, 409, 413, 422, 500]


# --- the worker nudge -----------------------------------------------------------------------------


def queued_tasks():
    return [(task.func(), task.args()) for task in OrmQ.objects.all()]


def test_it_wakes_the_workers_once_the_intake_commits_and_coalesces_the_wakeups(
    api, django_capture_on_commit_callbacks
):
    """The first event takes the wake-up and enqueues a task once it commits; events that find a
    wake-up pending enqueue nothing (and so pay no second commit): a stream of events costs one
    queue row per task that runs, not one per event."""
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        api.post("/api/v1/events", event("d-1"))
        assert queued_tasks() == []  # not before the commit
        api.post("/api/v1/events", event("d-2", version=4))
        api.post("/api/v1/events", event("d-3", version=5))

    assert len(callbacks) == 1
    assert queued_tasks() == [(PROCESS, (None,))]
    assert Wakeup.objects.count() == 1

    nudges.begin_processing()  # a task starts: the next event asks for a task of its own
    with django_capture_on_commit_callbacks(execute=True):
        api.post("/api/v1/events", event("d-4", version=6))

    assert queued_tasks() == [(PROCESS, (None,)), (PROCESS, (None,))]


@pytest.mark.parametrize(
    "body",
    [
        event("delivery-2"),
        event("delivery-2", title="Changed without a new version"),
        event("delivery-2", version=0),
    ],
)
def test_it_enqueues_nothing_for_a_duplicate_a_conflict_or_invalid_input(api, django_capture_on_commit_callbacks, body):
    api.post("/api/v1/events", event("delivery-1"))
    nudges.begin_processing()
    OrmQ.objects.all().delete()

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = api.post("/api/v1/events", body)

    assert response.json()["status"] in ("duplicate", "blocked")
    assert callbacks == []
    assert queued_tasks() == []
    assert not Wakeup.objects.exists()


def test_a_path_no_route_matches_is_answered_as_the_api_answers(client, token):
    """A key with a line break matches no route (Django's path converter refuses it): the answer
    is still the API's documented JSON 404, not the console's HTML page."""
    response = client.get("/api/v1/operations/demo:R-1%0Av1:prepare-brief", HTTP_AUTHORIZATION=f"Bearer {token}")

    assert (response.status_code, response["Content-Type"]) == (404, "application/json")
    assert response.json()["status"] == "not_found"
    assert client.get("/console/no-such-page/").status_code in (302, 404)  # the console keeps its own


@pytest.mark.parametrize("path", ["/api/v1/claims/demo:R-1%0A/outcome", "/api/v1/claims/x%0A/heartbeat", "/api/v2/x"])
def test_a_post_no_route_matches_is_the_apis_404_not_a_csrf_refusal(token, path):
    """The API authenticates by bearer token: a POST to a path no route matches (a key with a line
    break) is answered as a GET is, the API's 404, by a client that enforces CSRF as a browser's
    session would (found by schemathesis: 403 "Form expired")."""
    from django.test import Client

    response = Client(enforce_csrf_checks=True).post(
        path, "{}", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )

    assert (response.status_code, response["Content-Type"]) == (404, "application/json")
