"""Every answer the OpenAPI document lists is a body its schema accepts: for each status of each
operation, a real request through the Django test client that gets that status, its body checked
against the published JSON schema of that status (every variant: each reason, each batch result).
And a body the document does not describe cannot be built: the answers are the published models.

Needs PostgreSQL: the 503s take the database away, the batch's 500 result is a real database error.
"""

import gzip
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import jsonschema_rs
import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone
from pydantic import ValidationError
from standardwebhooks.webhooks import Webhook

from ledger.core import accounts
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import IntakeResult
from ledger.models import Workspace
from opsconsole.api import answers
from opsconsole.api.endpoints import api
from tests.conftest import event

pytestmark = pytest.mark.django_db

# The document as it is served: JSON, its statuses strings.
DOCUMENT = json.loads(json.dumps(api.get_openapi_schema()))
EVENTS = ("post", "/api/v1/events")
BATCH = ("post", "/api/v1/events/batch")
OPERATION = ("get", "/api/v1/operations/{key}")
CLAIMS = ("post", "/api/v1/claims")
HEARTBEAT = ("post", "/api/v1/claims/{key}/heartbeat")
OUTCOME = ("post", "/api/v1/claims/{key}/outcome")
HOOKS = ("post", "/api/v1/hooks/{source}")
DUE = ("get", "/api/v1/claims/due")
CLAIM_BATCH = ("post", "/api/v1/claims/batch")
INVOICE = {"request_id": "INV-7", "version": 1, "customer_id": "C-1", "amount_cents": 4500, "currency": "EUR"}


def published_schema(operation: tuple[str, str], status: int) -> dict:
    """The JSON schema the document gives the body of ``status``, with the components it refers to."""
    method, path = operation
    answer = DOCUMENT["paths"][path][method]["responses"][str(status)]
    return answer["content"]["application/json"]["schema"] | {"components": DOCUMENT["components"]}


@dataclass
class Sender:
    client: object
    token: str

    def post(self, path: str, body, content_type: str = "application/json", authorized: bool = True, **headers):
        data = body if isinstance(body, str | bytes) else json.dumps(body)
        if authorized:
            headers["HTTP_AUTHORIZATION"] = f"Bearer {self.token}"
        return self.client.post(path, data, content_type=content_type, **headers)

    def get(self, path: str, authorized: bool = True):
        headers = {"HTTP_AUTHORIZATION": f"Bearer {self.token}"} if authorized else {}
        return self.client.get(path, **headers)


def status_event(version: int) -> dict:
    """An ``update-status`` event: its action is ordered latest_wins, so an older version is stale."""
    return {"action": "update-status", "data": {"request_id": "R-7", "version": version, "status": "closed"}}


def occurred_long_ago() -> dict:
    """An event older than its action's key window (90 days, docs/retention.md): stale."""
    return event("d-old", version=9) | {"occurred_at": (timezone.now() - timedelta(days=365)).isoformat()}


# --- the requests, one or more per documented status ---------------------------------------------


def accepted(send: Sender):
    return send.post("/api/v1/events", event())


def duplicate(send: Sender):
    send.post("/api/v1/events", event())
    return send.post("/api/v1/events", event("delivery-2"))


def payload_conflict(send: Sender):
    send.post("/api/v1/events", event())
    return send.post("/api/v1/events", event("delivery-2", title="Changed without a new version"))


def stale_version(send: Sender):
    send.post("/api/v1/events", status_event(2))
    return send.post("/api/v1/events", status_event(1))


def stale_by_age(send: Sender):
    return send.post("/api/v1/events", occurred_long_ago())


def invalid_input(send: Sender):
    return send.post("/api/v1/events", event(version=0))


def malformed_json(send: Sender, path: str = "/api/v1/events"):
    return send.post(path, '{"action": ')


def duplicate_key(send: Sender):
    return send.post("/api/v1/events", '{"action": "prepare-brief", "action": "update-status", "data": {}}')


def bad_gzip(send: Sender, path: str = "/api/v1/events"):
    return send.post(path, b"not gzip at all", HTTP_CONTENT_ENCODING="gzip")


def too_large(send: Sender, path: str = "/api/v1/events"):
    limit = "OPSCONSOLE_MAX_BATCH_BODY_BYTES" if path.endswith("/batch") else "OPSCONSOLE_MAX_BODY_BYTES"
    with override_settings(**{limit: 100}):
        return send.post(path, {"events": [event(title="x" * 200)]} if path.endswith("batch") else event())


def gzip_too_large(send: Sender):
    """Small as sent, larger than the limit once decoded."""
    body = gzip.compress(json.dumps(event(title=" " * 500)).encode())
    assert len(body) < 200
    with override_settings(OPSCONSOLE_MAX_BODY_BYTES=200):
        return send.post("/api/v1/events", body, HTTP_CONTENT_ENCODING="gzip")


def not_json(send: Sender, path: str = "/api/v1/events"):
    return send.post(path, "action=prepare-brief", content_type="application/x-www-form-urlencoded")


def latin_1(send: Sender, path: str = "/api/v1/events"):
    return send.post(path, json.dumps(event()), content_type="application/json; charset=latin-1")


def brotli(send: Sender, path: str = "/api/v1/events"):
    return send.post(path, json.dumps(event()), HTTP_CONTENT_ENCODING="br")


def no_token(send: Sender, path: str = "/api/v1/events"):
    return send.post(path, event(), authorized=False)


def missing_scope(send: Sender, path: str = "/api/v1/events"):
    """A token of the workspace without the route's scope (one that may only read)."""
    reader = accounts.issue_token(workspace=Workspace.objects.get(slug="demo"), name="r", actor="t", scopes=["read"])
    return Sender(send.client, reader).post(path, event())


def every_batch_result(send: Sender):
    """One batch whose results are every kind of result a batch item can be, a 500 among them: a
    trigger refuses the one event titled ``refused by the database`` with a real database error."""
    with connection.cursor() as cursor:
        cursor.execute("""
            CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.payload->>'title' = 'refused by the database' THEN
                    RAISE EXCEPTION 'refused by the test' USING ERRCODE = 'check_violation';
                END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER test_refuse BEFORE INSERT ON ledger_operation
                FOR EACH ROW EXECUTE FUNCTION test_refuse();""")
    send.post("/api/v1/events", event())
    send.post("/api/v1/events", status_event(2))
    events = [
        event("d-2", version=4),
        event("d-3"),
        event("d-4", title="Changed without a new version"),
        status_event(1),
        occurred_long_ago(),
        event(version=0),
        event(title="x" * 400),
        event("d-5", version=5, title="refused by the database"),
    ]
    with override_settings(OPSCONSOLE_MAX_BODY_BYTES=300):
        response = send.post("/api/v1/events/batch", {"events": events})
    assert sorted(result["http_status"] for result in response.json()["results"]) == [
        200,
        201,
        409,
        409,
        409,
        413,
        422,
        500,
    ]
    return response


def batch_too_large(send: Sender):
    with override_settings(OPSCONSOLE_MAX_BATCH=2):
        return send.post("/api/v1/events/batch", {"events": [event()] * 3})


def events_not_a_list(send: Sender):
    return send.post("/api/v1/events/batch", {"events": "not a list"})


def an_operation(send: Sender):
    send.post("/api/v1/events", event())
    process_due_operations()
    response = read_the_operation(send)
    assert response.json()["result"] is not None
    return response


def read_the_operation(send: Sender):
    return send.get("/api/v1/operations/demo:R-42:v3:prepare-brief")


def a_batch(send: Sender):
    return send.post("/api/v1/events/batch", {"events": [event()]})


def an_operation_with_its_last_error(send: Sender, unknown_notice):
    response = send.get(f"/api/v1/operations/{unknown_notice.key}")
    assert response.json()["last_error"] is not None
    return response


def no_such_operation(send: Sender):
    return send.get("/api/v1/operations/demo:R-404:v1:prepare-brief")


def no_route_for_the_key(send: Sender):
    """A key with a line break matches no route: Django's 404, still the API's answer."""
    return send.get("/api/v1/operations/demo:R-1%0A:v1:prepare-brief")


def no_route_for_the_key_in_debug(send: Sender):
    """DEBUG answers what handler404 would with Django's own page: not under /api/."""
    with override_settings(DEBUG=True):
        return no_route_for_the_key(send)


def operation_without_token(send: Sender):
    return send.get("/api/v1/operations/demo:R-42:v3:prepare-brief", authorized=False)


def unreachable(send: Callable) -> Callable:
    """``send``, the database no longer answering (nothing listens on port 9)."""

    def send_unreachable(sender: Sender, database_down):
        database_down()
        return send(sender)

    send_unreachable.needs = "database_down"
    send_unreachable.__name__ = f"{send.__name__}_unreachable"
    return send_unreachable


def deadlocked(send: Sender, always_deadlocked):
    return send.post("/api/v1/events", event())


deadlocked.needs = "always_deadlocked"
an_operation_with_its_last_error.needs = "unknown_notice"


# --- claims (docs/claims.md) -------------------------------------------------------------------------


def invoice_claim(**data) -> dict:
    return {"action": "send-invoice", "data": INVOICE | data}


def due_listed(send: Sender, action=None):
    return send.get("/api/v1/claims/due")


def due_work(send: Sender, action=None):
    send.post("/api/v1/events", {"action": "send-invoice", "data": INVOICE})
    return due_listed(send)


def due_with_a_bad_limit(send: Sender, action=None):
    return send.get("/api/v1/claims/due?limit=0")


def due_without_claims_scope(send: Sender, action=None):
    reader = accounts.issue_token(workspace=Workspace.objects.get(slug="demo"), name="r", actor="t", scopes=["read"])
    return Sender(send.client, reader).get("/api/v1/claims/due")


def claimed_by_key(send: Sender, action=None):
    send.post("/api/v1/events", {"action": "send-invoice", "data": INVOICE})
    [due] = due_listed(send).json()["operations"]
    return send.post("/api/v1/claims", {"key": due["key"]})


def claimed_by_a_key_of_nothing(send: Sender, action=None):
    return send.post("/api/v1/claims", {"key": "demo:nothing:v1:send-invoice"})


def due_without_token(send: Sender, action=None):
    return send.get("/api/v1/claims/due", authorized=False)


def claimed(send: Sender, action=None):
    return send.post("/api/v1/claims", invoice_claim())


def claims_in_a_batch(send: Sender, action=None):
    return send.post(
        "/api/v1/claims/batch", {"claims": [invoice_claim(), invoice_claim(), {"key": "nothing"}, "not a claim"]}
    )


def a_claim_batch(send: Sender, action=None):
    response = claims_in_a_batch(send)
    assert [result["http_status"] for result in response.json()["results"]] == [201, 409, 404, 422]
    return response


def claims_not_a_list(send: Sender):
    return send.post("/api/v1/claims/batch", {"claims": "not a list"})


def claim_batch_too_large(send: Sender):
    return send.post("/api/v1/claims/batch", {"claims": [{"key": "k"}] * 101})


def claim_done(send: Sender, action=None):
    report(send, claimed(send).json(), outcome="succeeded", external_id="inv_1", result={"number": "F-1"})
    return claimed(send)


def claim_in_progress(send: Sender, action=None):
    claimed(send)
    return claimed(send)


def claim_needing_review(send: Sender, action=None):
    report(send, claimed(send).json(), outcome="failed", category="permanent", error="HTTP 400")
    return claimed(send)


def claim_conflict(send: Sender, action=None):
    claimed(send)
    return send.post("/api/v1/claims", invoice_claim(amount_cents=9900))


def claim_held(send: Sender, action=None):
    from ledger.people.pause import set_paused

    set_paused(paused=True, actor="ops", reason="vendor incident", action="send-invoice")
    return claimed(send)


def claim_with_a_bad_lease(send: Sender, action=None):
    return send.post("/api/v1/claims", invoice_claim() | {"lease_seconds": 0})


def report(send: Sender, claim: dict, **body):
    return send.post(f"/api/v1/claims/{claim['key']}/outcome", {"token": claim["token"], **body})


def heartbeat_extended(send: Sender, action=None):
    claim = claimed(send).json()
    return send.post(f"/api/v1/claims/{claim['key']}/heartbeat", {"token": claim["token"], "lease_seconds": 60})


def heartbeat_stale(send: Sender, action=None):
    claim = claimed(send).json()
    return send.post(f"/api/v1/claims/{claim['key']}/heartbeat", {"token": claim["token"] + "x"})


def heartbeat_of_no_operation(send: Sender):
    return send.post("/api/v1/claims/demo:nothing/heartbeat", {"token": "1.1:x"})


def heartbeat_invalid(send: Sender):
    return send.post("/api/v1/claims/demo:nothing/heartbeat", {"token": "1.1:x", "lease_seconds": 1})


def outcome_recorded(send: Sender, action=None):
    return report(send, claimed(send).json(), outcome="failed", category="transient", error="HTTP 503")


def outcome_stale(send: Sender, action=None):
    claim = claimed(send).json()
    return report(send, claim | {"token": claim["token"] + "x"}, outcome="succeeded")


def outcome_conflict(send: Sender, action=None):
    claim = claimed(send).json()
    report(send, claim, outcome="unknown")
    return report(send, claim, outcome="succeeded")


def outcome_of_no_operation(send: Sender):
    return send.post("/api/v1/claims/demo:nothing/outcome", {"token": "1.1:x", "outcome": "succeeded"})


def outcome_invalid(send: Sender):
    return send.post("/api/v1/claims/demo:nothing/outcome", {"token": "1.1:x", "outcome": "failed"})


# The demo's send-invoice, declared in its integrations file, is configured first.
for _claims_case in (
    due_work,
    claimed_by_key,
    claimed,
    a_claim_batch,
    claim_done,
    claim_in_progress,
    claim_needing_review,
    claim_conflict,
    claim_held,
    claim_with_a_bad_lease,
    heartbeat_extended,
    heartbeat_stale,
    outcome_recorded,
    outcome_stale,
    outcome_conflict,
):
    _claims_case.needs = "send_invoice_action"


def heartbeat_of(send: Sender):
    return send.post("/api/v1/claims/demo:nothing/heartbeat", {"token": "1.1:x"})


def outcome_of(send: Sender):
    return send.post("/api/v1/claims/demo:nothing/outcome", {"token": "1.1:x", "outcome": "succeeded"})


# --- signed webhooks in (/hooks/{source}) -------------------------------------------------------------

HOOK_SECRET = "whsec_" + "c2VjcmV0IG9mIHRoZSB0ZXN0IHNvdXJjZSEhISEhISE="
HOOK_RULES = [
    {
        "event": "invoice.paid",
        "action": "prepare-brief",
        "data": {"request_id": "data.id", "version": "data.version", "title": "data.title", "owner": "'ops'"},
    }
]


@pytest.fixture(autouse=True)
def hook_secret(monkeypatch):
    monkeypatch.setenv("OPSCONSOLE_SOURCE_DEMO_TEST_HOOK", HOOK_SECRET)


def hook(send: Sender, data: dict | None = None, *, event: str = "invoice.paid", msg_id: str = "msg_1", **headers):

    from ledger.models import Source, Workspace

    Source.objects.get_or_create(
        slug="billing",
        defaults={
            "workspace": Workspace.objects.get(slug="demo"),
            "scheme": "standard_webhooks",
            "secret_env": "OPSCONSOLE_SOURCE_DEMO_TEST_HOOK",
            "rules": HOOK_RULES,
        },
    )
    body = json.dumps({"type": event, "data": {"id": "R-9", "version": 1, "title": "Paid"} | (data or {})})
    return send.client.post(
        "/api/v1/hooks/billing", body, content_type="application/json", **(signed(body, msg_id) | headers)
    )


def signed(body: str, msg_id: str) -> dict:
    """The Standard Webhooks headers of ``body``, signed now with the test source's secret."""

    at = timezone.now()
    return {
        "HTTP_WEBHOOK_ID": msg_id,
        "HTTP_WEBHOOK_TIMESTAMP": str(int(at.timestamp())),
        "HTTP_WEBHOOK_SIGNATURE": Webhook(HOOK_SECRET).sign(msg_id, at, body),
    }


def hook_taken(send: Sender):
    return hook(send)


def hook_duplicate(send: Sender):
    hook(send)
    return hook(send)


def hook_verified(send: Sender):
    hook(send, event="nothing")  # makes the source
    return send.client.post("/api/v1/hooks/billing", "", content_type="application/json", HTTP_WEBHOOK_CHALLENGE="c1")


def hook_ignored(send: Sender):
    return hook(send, event="customer.created")


def hook_forged(send: Sender):
    return hook(send, HTTP_WEBHOOK_SIGNATURE="v1,Zm9yZ2Vk")


def hook_conflict(send: Sender):
    hook(send)
    return hook(send, {"title": "Paid twice"}, msg_id="msg_2")


def hook_invalid(send: Sender):
    return hook(send, {"version": 0})


def hook_signed_but_not_json(send: Sender):
    hook(send, event="nothing")
    body = '{"type": '
    return send.client.post("/api/v1/hooks/billing", body, content_type="application/json", **signed(body, "msg_3"))


def hook_of_no_source(send: Sender):
    return send.client.post("/api/v1/hooks/nobody", "{}", content_type="application/json")


def hook_without_its_secret(send: Sender):
    hook(send, event="nothing")
    os.environ.pop("OPSCONSOLE_SOURCE_DEMO_TEST_HOOK")
    return hook(send)


def _refusals(operation: tuple[str, str], path: str, *, token: bool = True) -> list:
    """The refusals every POST route shares: what its body or token gets wrong."""
    return [
        Case(operation, status, _on(path, send))
        for status, send in (
            (400, malformed_json),
            (400, bad_gzip),
            (413, too_large),
            (415, not_json),
            (415, latin_1),
            (415, brotli),
            *([(401, no_token), (403, missing_scope)] if token else []),
        )
    ]


def _made_source(send: Callable) -> Callable:
    """``send`` to the hooks route once its source exists (the body refusals come before the signature)."""

    def with_source(sender: Sender):
        hook(sender, event="nothing")
        return send(sender)

    with_source.__name__ = send.__name__
    return with_source


@dataclass(frozen=True)
class Case:
    operation: tuple[str, str]
    status: int
    send: Callable
    transactional: bool = False

    @property
    def id(self) -> str:
        return f"{self.operation[0].upper()} {self.operation[1]} {self.status} {self.send.__name__}"


def _on(path: str, send: Callable) -> Callable:
    def bound(sender: Sender):
        return send(sender, path=path)

    bound.__name__ = send.__name__
    return bound


CASES = [
    Case(EVENTS, 201, accepted),
    Case(EVENTS, 200, duplicate),
    Case(EVENTS, 409, payload_conflict),
    Case(EVENTS, 409, stale_version),
    Case(EVENTS, 409, stale_by_age),
    Case(EVENTS, 422, invalid_input),
    Case(EVENTS, 400, malformed_json),
    Case(EVENTS, 400, duplicate_key),
    Case(EVENTS, 400, bad_gzip),
    Case(EVENTS, 413, too_large),
    Case(EVENTS, 413, gzip_too_large),
    Case(EVENTS, 415, not_json),
    Case(EVENTS, 415, latin_1),
    Case(EVENTS, 415, brotli),
    Case(EVENTS, 401, no_token),
    Case(EVENTS, 403, missing_scope),
    Case(EVENTS, 503, unreachable(accepted), transactional=True),
    Case(EVENTS, 503, deadlocked, transactional=True),
    Case(BATCH, 200, every_batch_result),
    Case(BATCH, 422, events_not_a_list),
    Case(BATCH, 413, batch_too_large),
    *_refusals(BATCH, "/api/v1/events/batch"),
    Case(BATCH, 503, unreachable(a_batch), transactional=True),
    Case(OPERATION, 200, an_operation),
    Case(OPERATION, 200, an_operation_with_its_last_error),
    Case(OPERATION, 404, no_such_operation),
    Case(OPERATION, 404, no_route_for_the_key),
    Case(OPERATION, 404, no_route_for_the_key_in_debug),
    Case(OPERATION, 401, operation_without_token),
    Case(OPERATION, 503, unreachable(read_the_operation), transactional=True),
    Case(CLAIMS, 201, claimed),
    Case(CLAIMS, 201, claimed_by_key),
    Case(CLAIMS, 404, claimed_by_a_key_of_nothing),
    Case(CLAIMS, 200, claim_done),
    Case(CLAIMS, 409, claim_in_progress),
    Case(CLAIMS, 409, claim_needing_review),
    Case(CLAIMS, 409, claim_conflict),
    Case(CLAIMS, 423, claim_held),
    Case(CLAIMS, 422, claim_with_a_bad_lease),
    *_refusals(CLAIMS, "/api/v1/claims"),
    Case(CLAIMS, 503, unreachable(claimed), transactional=True),
    Case(CLAIM_BATCH, 200, a_claim_batch),
    Case(CLAIM_BATCH, 422, claims_not_a_list),
    Case(CLAIM_BATCH, 413, claim_batch_too_large),
    *_refusals(CLAIM_BATCH, "/api/v1/claims/batch"),
    Case(CLAIM_BATCH, 503, unreachable(claims_in_a_batch), transactional=True),
    Case(HEARTBEAT, 200, heartbeat_extended),
    Case(HEARTBEAT, 409, heartbeat_stale),
    Case(HEARTBEAT, 404, heartbeat_of_no_operation),
    Case(HEARTBEAT, 422, heartbeat_invalid),
    *_refusals(HEARTBEAT, "/api/v1/claims/demo:nothing/heartbeat"),
    Case(HEARTBEAT, 503, unreachable(heartbeat_of), transactional=True),
    Case(OUTCOME, 200, outcome_recorded),
    Case(OUTCOME, 409, outcome_stale),
    Case(OUTCOME, 409, outcome_conflict),
    Case(OUTCOME, 404, outcome_of_no_operation),
    Case(OUTCOME, 422, outcome_invalid),
    *_refusals(OUTCOME, "/api/v1/claims/demo:nothing/outcome"),
    Case(OUTCOME, 503, unreachable(outcome_of), transactional=True),
    Case(DUE, 200, due_work),
    Case(DUE, 422, due_with_a_bad_limit),
    Case(DUE, 401, due_without_token),
    Case(DUE, 403, due_without_claims_scope),
    Case(DUE, 503, unreachable(due_listed), transactional=True),
    Case(HOOKS, 201, hook_taken),
    Case(HOOKS, 200, hook_duplicate),
    Case(HOOKS, 200, hook_verified),
    Case(HOOKS, 202, hook_ignored),
    Case(HOOKS, 401, hook_forged),
    Case(HOOKS, 409, hook_conflict),
    Case(HOOKS, 422, hook_invalid),
    Case(HOOKS, 404, hook_of_no_source),
    Case(HOOKS, 503, hook_without_its_secret),
    Case(HOOKS, 400, hook_signed_but_not_json),
    *(
        Case(case.operation, case.status, _made_source(case.send))
        for case in _refusals(HOOKS, "/api/v1/hooks/billing", token=False)
        # Malformed JSON is found once the signature held, which an unsigned body never does.
        if case.send.__name__ != "malformed_json"
    ),
]


# The management routes' answers are proved by tests/api/test_management_answers.py.
MANAGEMENT_TAGS = {"decisions", "pauses", "operations"}


@pytest.mark.slow
def test_a_request_gets_every_status_the_document_lists_and_no_other():
    documented = {
        (method, path, int(status))
        for path, methods in DOCUMENT["paths"].items()
        for method, spec in methods.items()
        if not MANAGEMENT_TAGS & set(spec.get("tags", []))
        for status in spec["responses"]
    }
    managed = {(method, path) for path, methods in DOCUMENT["paths"].items() for method in methods} - {
        (method, path) for method, path, _ in documented
    }
    assert {(*case.operation, case.status) for case in CASES if case.operation not in managed} == documented


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, id=case.id, marks=[pytest.mark.django_db(transaction=True)] if case.transactional else [])
        for case in CASES
    ],
)
def test_each_answer_is_a_body_its_published_schema_accepts(case, client, token, request):
    client.raise_request_exception = False
    answers_as_published(case, Sender(client, token), request)


def answers_as_published(case, sender, request) -> None:
    """Send ``case`` (with the fixture it needs, if any) and assert it gets its status with a JSON
    body the published schema of that status accepts."""
    needs = getattr(case.send, "needs", None)
    response = case.send(sender, request.getfixturevalue(needs)) if needs else case.send(sender)

    assert response.status_code == case.status, response.content
    assert response["Content-Type"] == "application/json"
    validator = jsonschema_rs.Draft202012Validator(published_schema(case.operation, case.status), validate_formats=True)
    errors = [error.message for error in validator.iter_errors(response.json())]
    assert errors == [], response.json()


# --- the fixtures some requests need --------------------------------------------------------------


@pytest.fixture
def database_down():
    """Call it to make the database stop answering: the next connection attempt is refused."""
    original = dict(connection.settings_dict)

    def take_down():
        connection.close()
        connection.settings_dict["PORT"] = "9"

    yield take_down
    connection.close()
    connection.settings_dict.clear()
    connection.settings_dict.update(original)


@pytest.fixture
def always_deadlocked():
    """Every insert of an operation is aborted as a deadlock: the request, run again, is answered busy."""
    with connection.cursor() as cursor:
        cursor.execute("""
            CREATE FUNCTION test_deadlocked() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                RAISE EXCEPTION 'deadlock detected (made by the test)' USING ERRCODE = 'deadlock_detected';
            END $$;
            CREATE TRIGGER test_deadlocked BEFORE INSERT ON ledger_operation
                FOR EACH ROW EXECUTE FUNCTION test_deadlocked();""")
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER test_deadlocked ON ledger_operation; DROP FUNCTION test_deadlocked();")


# --- a body the document does not describe cannot be built ----------------------------------------


def test_an_answer_with_a_field_the_document_does_not_list_cannot_be_built():
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        answers.Unauthorized(detail="no token", hint="abc")


def test_an_intake_result_the_document_does_not_describe_cannot_be_answered():
    """A refusal with a field its published answer lacks, or a reason no answer lists, is never sent."""
    extra_field = IntakeResult(
        outcome="invalid",
        http_status=422,
        reason="invalid_input",
        errors=[{"field": "body", "message": "must be a JSON object"}],
        extra={"hint": "x"},
    )
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        answers.intake_answer(extra_field)
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        answers.batch_answer([extra_field])
    with pytest.raises(ValueError, match="no published answer for the reason 'unheard_of'"):
        answers.intake_answer(IntakeResult(outcome="invalid", http_status=422, reason="unheard_of"))


def test_a_problem_with_a_field_the_document_does_not_list_cannot_be_answered():
    with_value = IntakeResult(
        outcome="invalid",
        http_status=422,
        reason="invalid_input",
        errors=[{"field": "data.title", "message": "too long", "input": "private text"}],
    )
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        answers.intake_answer(with_value)


def test_a_batch_result_must_have_the_status_its_answer_is_published_with():
    invalid_as_500 = IntakeResult(
        outcome="invalid",
        http_status=500,
        reason="invalid_input",
        errors=[{"field": "body", "message": "must be a JSON object"}],
    )
    with pytest.raises(ValidationError, match="http_status"):
        answers.batch_answer([invalid_as_500])
