"""HTTP API under /api/v1/ (django-ninja). Thin: authenticate, decode, call intake, answer.

Bodies are decoded here rather than by ninja so that every failure keeps the ledger's own shape
(``{"status": "blocked", "reason": ...}``) and every arrival, malformed ones too, is recorded.
The OpenAPI document publishes each action's envelope (its ``data`` is the action's schema) and
every answer with its status; the answers are the models of ``opsconsole.api.answers``, and every
body is one of them, built and dumped.
"""

import logging
import operator
from functools import reduce
from typing import Annotated, Any, Literal, cast

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, ValidationError
from ninja.openapi.schema import REF_TEMPLATE
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model

from ledger.actions import registry
from ledger.callers import claiming, claims, reports
from ledger.intake import decoding, refusals, submit
from ledger.intake.submit import Envelope, IntakeResult
from ledger.integrations import sources
from ledger.models import Delivery, Source
from opsconsole.api import answers, claim_answers, due_work, http_bodies, operate
from opsconsole.api.answers import BATCH_RESPONSES, EVENT_RESPONSES
from opsconsole.api.operate_answers import InputRefused
from opsconsole.api.problems import ApiProblem
from opsconsole.api.request_bodies import json_body, schema_body
from opsconsole.api.tokens import CLAIMING, CLAIMS, EVENTS, READ, checked_by_reservation, reserving, reveals
from opsconsole.proxy import client_ip

SOURCE = Delivery.Source.API
logger = logging.getLogger("ledger")


# --- what the document publishes besides the answers ----------------------------------------------


def _event_schema(*, claims: bool = False) -> tuple[dict, dict]:
    """The schema of one event: one envelope per action defined in code, told apart by ``action``,
    each with that action's schema as ``data``; and the components it refers to. With ``claims``:
    the claim of an action its caller performs, an event with the lease the caller asks for. (The
    document is built once, at start: configured HTTP actions, which change while it runs, publish
    their data's JSON Schema with ``manage.py integrations export``.)"""
    envelopes = [
        create_model(
            "".join(part.title() for part in name.split("-")) + ("Claim" if claims else "Event"),
            __base__=ClaimEnvelope if claims else Envelope,
            __doc__=f"{'A claim of' if claims else 'An event of'} action `{name}`.",
            action=cast(Any, (Literal[name], ...)),  # a value known only here: pydantic takes it as a type
            data=(action.schema, ...),
        )
        for name, action in sorted(registry.coded.items())
        if action.submittable and (action.performed_by_caller or not claims)
    ]
    if not envelopes:
        # No action in code is performed by its caller (they are configured, as the demo's
        # send-invoice is): one claim of any action, its data checked by the action when it comes.
        return {"$ref": REF_TEMPLATE.format(model="Claim")}, {"Claim": _claim_schema()}
    either: Any = Annotated[reduce(operator.or_, envelopes), Field(discriminator="action")]
    schema = TypeAdapter(either).json_schema(ref_template=REF_TEMPLATE)
    return schema, schema.pop("$defs")


LeaseSeconds = Annotated[
    int | None,
    Field(
        ge=settings.OPSCONSOLE_CLAIM_LEASE_SECONDS_MIN,
        le=settings.OPSCONSOLE_CLAIM_LEASE_SECONDS_MAX,
        description="How long the claim is yours unless you heartbeat; default the action's lease.",
    ),
]


class ClaimEnvelope(Envelope):
    lease_seconds: LeaseSeconds = None


def _claim_schema() -> dict:
    schema = ClaimEnvelope.model_json_schema(ref_template=REF_TEMPLATE)
    schema["description"] = "A claim of an action its caller performs: `data` as the action's schema says."
    return schema


class ClaimByKey(BaseModel):
    """A claim of an operation already recorded, by its key: due work you were told of
    (`operation.due`) or listed (`GET /claims/due`). The answer's `data` says what to send."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=1, description="The operation's key, as the notification or the due list gave it.")
    lease_seconds: LeaseSeconds = None


def _claims_schema() -> tuple[dict, dict]:
    """A claim: an event of an action its caller performs, or a recorded operation's key."""
    of_an_event, components = _event_schema(claims=True)
    components["ClaimByKey"] = ClaimByKey.model_json_schema(ref_template=REF_TEMPLATE)
    return {"anyOf": [of_an_event, {"$ref": REF_TEMPLATE.format(model="ClaimByKey")}]}, components


EVENT_SCHEMA, EVENT_COMPONENTS = _event_schema()
CLAIM_SCHEMA, CLAIM_COMPONENTS = _claims_schema()


# --- the views ------------------------------------------------------------------------------------


class LedgerAPI(NinjaAPI):
    def get_openapi_schema(self, **kwargs):
        schema = super().get_openapi_schema(**kwargs)
        schema["components"]["schemas"].update(EVENT_COMPONENTS | CLAIM_COMPONENTS)
        return schema


# Each route names the scope it needs; a route that names none needs `read`.
api = LedgerAPI(title="opsconsole", version="1", urls_namespace="api-v1", auth=READ)
# The management routes (docs/api-for-flows.md): decisions, pauses, the operations' list and page.
api.add_router("", operate.router)


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def database_unavailable(request, exc):
    # Not answered here: Django's middleware (opsconsole.middleware) turns it into 503 with
    # Retry-After, the same in DEBUG (where ninja would otherwise answer a traceback) and in production.
    raise exc


@api.exception_handler(AuthenticationError)
def unauthorized(request, exc):
    return answers.respond(answers.UNAUTHORIZED, 401)


@api.exception_handler(ValidationError)
def invalid_parameters(request, exc: ValidationError) -> HttpResponse:
    """A query or path parameter that breaks its published rule (the bodies are read by the routes)."""
    errors = [
        answers.FieldProblem(
            field=".".join(str(part) for part in error.get("loc", ())[1:]) or "query", message=error["msg"]
        )
        for error in exc.errors
    ]
    detail = "; ".join(f"{error.field}: {error.message}" for error in errors)
    return answers.respond(InputRefused(reason="invalid_input", detail=detail, errors=errors), 422)


@api.exception_handler(ApiProblem)
def answer_problem(request, problem: ApiProblem) -> HttpResponse:
    """Every refusal a route raises: its answer as it is, or the arrival recorded and answered."""
    if problem.answer is not None:
        return answers.respond(problem.answer, problem.status, problem.headers)
    return _respond(request, _record_refusal(request, problem), headers=problem.headers)


def _record_refusal(request, problem: ApiProblem) -> IntakeResult:
    said: dict[str, Any] = {
        "reason": problem.reason,
        "errors": problem.errors,
        "http_status": problem.status,
        "extra": problem.extra,
    }
    if (hook := getattr(request, "unverified_hook", None)) is not None:
        # A hook's body refused before its signature is checked: anyone's, counted rather than a row.
        return refusals.refuse_unverified(hook, address=client_ip(request), **said)
    source = getattr(request, "delivery_source", SOURCE)
    return submit.record_blocked_delivery(workspace=request.workspace, source=source, **_sender(request), **said)


def _respond(request, result: IntakeResult, headers: dict | None = None) -> HttpResponse:
    reveal = result.operation is not None and reveals(request)
    return answers.respond(answers.intake_answer(result, reveal=reveal), result.http_status, headers)


def _sender(request) -> dict:
    """Who sent the request, as intake records it: the label and the person (if the token is one's)."""
    return {"submitted_by": request.submitter, "person": request.person}


def _decode(request: HttpRequest, limit: int):
    """The JSON body (``http_bodies.read_body`` says what is wrong with the bytes)."""
    try:
        return decoding.decode_json(http_bodies.read_body(request, limit))
    except decoding.MalformedJSON as exc:
        raise ApiProblem(400, reason=exc.reason, errors=exc.errors) from None


@api.post(
    "/events",
    auth=EVENTS,
    response=EVENT_RESPONSES,
    openapi_extra=schema_body(EVENT_SCHEMA),
    summary="Submit one event: accepted (201), duplicate (200), blocked (409/422/400/413/415)",
)
@checked_by_reservation
def submit_event(request):
    raw = _decode(request, settings.OPSCONSOLE_MAX_BODY_BYTES)
    result = reserving(
        request,
        lambda token: submit.submit_event(
            workspace=request.workspace, raw=raw, source=SOURCE, token=token, **_sender(request)
        ),
    )
    return _respond(request, result)


@api.post(
    "/events/batch",
    auth=EVENTS,
    response=BATCH_RESPONSES,
    summary="Submit up to OPSCONSOLE_MAX_BATCH events; each stands alone",
    openapi_extra=schema_body(
        {
            "type": "object",
            "required": ["events"],
            "properties": {
                "events": {
                    "type": "array",
                    "maxItems": settings.OPSCONSOLE_MAX_BATCH,
                    # Whatever an item holds, the batch takes it: an item that is no event is answered
                    # on its own, with a 422 in its result.
                    "items": {"anyOf": [EVENT_SCHEMA, {"description": "anything else: refused on its own (422)"}]},
                }
            },
        }
    ),
)
@checked_by_reservation
def submit_batch(request):
    """Each event is answered in `results` with the `http_status` it would have had alone, and its
    writes are its own: an event that fails leaves nothing, the others stand. An event that fails
    unexpectedly (a server error) is answered `http_status` 500, `status` `error`, and is not
    recorded, so sending it again is safe."""
    raw = _decode(request, settings.OPSCONSOLE_MAX_BATCH_BODY_BYTES)
    events = raw.get("events") if isinstance(raw, dict) else None
    if not isinstance(events, list):
        raise ApiProblem(422, reason="invalid_input", field="events", message="must be a list of events")
    limit = settings.OPSCONSOLE_MAX_BATCH
    if len(events) > limit:
        # Refused whole and recorded nowhere: nothing in it was looked at.
        raise ApiProblem(413, answer=answers.batch_too_large(limit))
    results = reserving(
        request,
        lambda token: submit.submit_batch(
            workspace=request.workspace,
            raw_events=events,
            source=SOURCE,
            max_event_bytes=settings.OPSCONSOLE_MAX_BODY_BYTES,
            token=token,
            **_sender(request),
        ),
    )
    reveal = any(result.operation is not None for result in results) and reveals(request)
    return answers.respond(answers.batch_answer(results, reveal=reveal), 200)


# --- claims: operations their callers perform (docs/claims.md) ------------------------------------


@api.post(
    "/claims",
    auth=CLAIMING,
    response=claim_answers.CLAIM_RESPONSES,
    openapi_extra=schema_body(CLAIM_SCHEMA),
    summary="Claim an operation you perform: claimed (201, act now), done (200), or why not (409/423)",
)
@checked_by_reservation
def claim(request):
    raw = _decode(request, settings.OPSCONSOLE_MAX_BODY_BYTES)
    answer = reserving(
        request, lambda token: claiming.claim(workspace=request.workspace, raw=raw, token=token, **_sender(request))
    )
    return claim_answers.claim_response(answer, reveal=reveals(request))


# The most claims a batch may hold (settings.OPSCONSOLE_MAX_CLAIM_BATCH): each is decided with its
# operation's row held, all in one transaction, so fewer than the events a batch may hold.
MAX_CLAIM_BATCH = settings.OPSCONSOLE_MAX_CLAIM_BATCH


@api.post(
    "/claims/batch",
    auth=CLAIMING,
    response=claim_answers.CLAIM_BATCH_RESPONSES,
    summary=f"Claim up to {MAX_CLAIM_BATCH} operations you perform at once; each is answered as alone",
    openapi_extra=schema_body(
        {
            "type": "object",
            "required": ["claims"],
            "properties": {
                "claims": {
                    "type": "array",
                    "maxItems": MAX_CLAIM_BATCH,
                    # As /events/batch: an item that is no claim is answered on its own (422).
                    "items": {"anyOf": [CLAIM_SCHEMA, {"description": "anything else: refused on its own (422)"}]},
                }
            },
        }
    ),
)
@checked_by_reservation
def claim_batch(request):
    """Each claim (an envelope or a key, as `POST /claims` takes them) is answered in `results` with
    the `http_status` it would have had alone; all are decided in one transaction, in their order,
    so a key twice in the batch is claimed by its first item and the later ones are answered
    `in_progress`. Only a result with `status` `claimed` says act, with its own token."""
    raw = _decode(request, settings.OPSCONSOLE_MAX_BATCH_BODY_BYTES)
    items = raw.get("claims") if isinstance(raw, dict) else None
    if not isinstance(items, list):
        raise ApiProblem(422, reason="invalid_input", field="claims", message="must be a list of claims")
    if len(items) > MAX_CLAIM_BATCH:
        # Refused whole and recorded nowhere: nothing in it was looked at.
        raise ApiProblem(413, answer=answers.batch_too_large(MAX_CLAIM_BATCH, items="claims"))
    answered = reserving(
        request,
        lambda token: claiming.claim_each(
            workspace=request.workspace,
            raws=items,
            max_claim_bytes=settings.OPSCONSOLE_MAX_BODY_BYTES,
            token=token,
            **_sender(request),
        ),
    )
    reveal = any(answer.operation is not None for answer in answered) and reveals(request)
    return answers.respond(claim_answers.claim_batch_answer(answered, reveal=reveal), 200)


@api.post(
    "/claims/{path:key}/heartbeat",
    auth=CLAIMS,
    response=claim_answers.HEARTBEAT_RESPONSES,
    openapi_extra=json_body(reports.Heartbeat),
    summary="Extend the lease of the claim you hold",
)
def heartbeat(request, key: str):
    body = _read(request, reports.Heartbeat)
    answer = claims.heartbeat(
        workspace=request.workspace,
        key=key,
        token=body.token,
        lease_seconds=body.lease_seconds,
        actor=request.submitter,
    )
    return claim_answers.claim_response(answer, reveal=reveals(request))


@api.post(
    "/claims/{path:key}/outcome",
    auth=CLAIMING,
    response=claim_answers.OUTCOME_RESPONSES,
    openapi_extra=json_body(reports.OutcomeReport),
    summary="Report what your claimed try came to: succeeded, failed (transient or permanent) or unknown",
)
@checked_by_reservation
def outcome(request, key: str):
    report = _read(request, reports.OutcomeReport)
    answer = reserving(
        request,
        lambda token: reports.report_outcome(
            workspace=request.workspace, key=key, report=report, actor=request.submitter, token=token
        ),
    )
    return claim_answers.claim_response(answer, reveal=reveals(request))


def _read(request, model):
    """The body as ``model`` (refused, and recorded as every refused request is, where it is not)."""
    body, errors = reports.read(model, _decode(request, settings.OPSCONSOLE_MAX_BODY_BYTES))
    if errors:
        raise ApiProblem(422, reason="invalid_input", errors=errors)
    return body


api.add_router("/claims", due_work.router)  # GET /claims/due


# --- signed webhooks in (ledger.integrations.sources) ------------------------------------------------


@api.post(
    "/hooks/{source}",
    auth=None,
    response=answers.HOOK_RESPONSES,
    openapi_extra=schema_body({"type": "object", "description": "The sender's own body, signed as its scheme says."}),
    summary="A signed webhook of a configured source: taken as an event (201/200), ignored (202), or refused (401)",
)
def receive_hook(request, source: str):
    """No bearer token: the sender signs each delivery with the source's secret instead (Standard
    Webhooks, GitHub or Stripe headers), and the source's rules map its body to an event."""
    found = None if decoding.storable_text_problem(source) else Source.objects.filter(slug=source).first()
    if found is None:
        raise ApiProblem(404, answer=answers.NO_SUCH_SOURCE)
    request.workspace, request.person, request.submitter = found.workspace, None, f"source:{found.slug}"
    request.workspace_role = None
    request.delivery_source = Delivery.Source.WEBHOOK
    request.unverified_hook, address = found, client_ip(request)
    try:
        if challenge := sources.answer_challenge(found, request.headers, address=address):
            return answers.respond(answers.Verified(), 200, {"webhook-challenge-response": challenge})
        body = http_bodies.read_body(request, settings.OPSCONSOLE_MAX_BODY_BYTES)
        result = sources.receive(found, body, request.headers, address=address)
    except sources.SecretMissing as exc:
        logger.error("%s", exc)
        unavailable = answers.Unavailable(status="unavailable", detail="This source cannot check signatures yet.")
        raise ApiProblem(503, answer=unavailable, headers={"Retry-After": "60"}) from None
    if isinstance(result, sources.Ignored):
        return answers.respond(answers.Ignored(event=result.event, delivery_id=result.delivery.sender_delivery_id), 202)
    return _respond(request, result)
