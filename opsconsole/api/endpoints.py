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
from typing import Annotated, Literal

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError
from ninja.openapi.schema import REF_TEMPLATE
from ninja.security import HttpBearer
from pydantic import Field, TypeAdapter, create_model

from ledger.actions import registry
from ledger.callers import claims, reports
from ledger.core import privacy
from ledger.core.accounts import authenticate_token
from ledger.intake import decoding, refusals, submit
from ledger.intake.submit import Envelope, IntakeResult
from ledger.integrations import sources
from ledger.models import Delivery, Operation, Source
from opsconsole.api import answers, claim_answers, http_bodies
from opsconsole.api.answers import BATCH_RESPONSES, EVENT_RESPONSES, OPERATION_RESPONSES
from opsconsole.proxy import client_ip

SOURCE = Delivery.Source.API
logger = logging.getLogger("ledger")


# --- what the document publishes besides the answers ----------------------------------------------

_RETRY_AFTER = {
    "responses": {
        503: {
            "headers": {
                "Retry-After": {"description": "Seconds to wait before sending again.", "schema": {"type": "integer"}}
            }
        }
    }
}


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
            action=(Literal[name], ...),
            data=(action.schema, ...),
        )
        for name, action in sorted(registry.coded.items())
        if action.performed_by_caller or not claims
    ]
    either = Annotated[reduce(operator.or_, envelopes), Field(discriminator="action")]
    schema = TypeAdapter(either).json_schema(ref_template=REF_TEMPLATE)
    return schema, schema.pop("$defs")


class ClaimEnvelope(Envelope):
    lease_seconds: int | None = Field(
        None,
        ge=settings.OPSCONSOLE_CLAIM_LEASE_SECONDS_MIN,
        le=settings.OPSCONSOLE_CLAIM_LEASE_SECONDS_MAX,
        description="How long the claim is yours unless you heartbeat; default the action's lease.",
    )


EVENT_SCHEMA, EVENT_COMPONENTS = _event_schema()
CLAIM_SCHEMA, CLAIM_COMPONENTS = _event_schema(claims=True)


def _json_body(schema: dict) -> dict:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}} | _RETRY_AFTER


# --- the views ------------------------------------------------------------------------------------


class WorkspaceToken(HttpBearer):
    def authenticate(self, request, token):
        api_token = authenticate_token(token)
        if api_token is not None:
            request.workspace = api_token.workspace
            # A person's token submits as that person (who then cannot approve what they sent).
            request.person = api_token.user
            request.workspace_role = api_token.workspace_role  # read with the token: what _reveals needs
            request.submitter = api_token.user.get_username() if api_token.user else f"token:{api_token.hint}"
        return api_token


class LedgerAPI(NinjaAPI):
    def get_openapi_schema(self, **kwargs):
        schema = super().get_openapi_schema(**kwargs)
        schema["components"]["schemas"].update(EVENT_COMPONENTS | CLAIM_COMPONENTS)
        return schema


api = LedgerAPI(title="opsconsole", version="1", urls_namespace="api-v1", auth=WorkspaceToken())


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def database_unavailable(request, exc):
    # Not answered here: Django's middleware (opsconsole.middleware) turns it into 503 with
    # Retry-After, the same in DEBUG (where ninja would otherwise answer a traceback) and in production.
    raise exc


@api.exception_handler(AuthenticationError)
def unauthorized(request, exc):
    return answers.respond(answers.UNAUTHORIZED, 401)


def _blocked_response(
    request,
    *,
    reason: str,
    message: str = "",
    http_status: int,
    field: str = "body",
    extra: dict | None = None,
    errors: list[dict] | None = None,
    headers: dict | None = None,
) -> HttpResponse:
    errors = errors or [{"field": field, "message": message}]
    if (hook := getattr(request, "unverified_hook", None)) is not None:
        # A hook's body refused before its signature is checked: anyone's, counted rather than a row.
        result = refusals.refuse_unverified(
            hook, address=client_ip(request), reason=reason, errors=errors, http_status=http_status, extra=extra
        )
        return _respond(request, result, headers=headers)
    result = submit.record_blocked_delivery(
        workspace=request.workspace,
        source=getattr(request, "delivery_source", SOURCE),
        **_sender(request),
        reason=reason,
        errors=errors,
        http_status=http_status,
        extra=extra,
    )
    return _respond(request, result, headers=headers)


def _respond(request, result: IntakeResult, headers: dict | None = None) -> HttpResponse:
    reveal = result.operation is not None and _reveals(request)
    return answers.respond(answers.intake_answer(result, reveal=reveal), result.http_status, headers)


def _reveals(request) -> bool:
    """Whether the token's person may see sensitive values in its workspace (a machine's may not):
    what the operation bodies of the answer show."""
    return privacy.may_view_sensitive_as(request.person, request.workspace_role)


def _sender(request) -> dict:
    """Who sent the request, as intake records it: the label and the person (if the token is one's)."""
    return {"submitted_by": request.submitter, "person": request.person}


def _is_json(content_type: str) -> bool:
    return content_type == "application/json" or (
        content_type.startswith("application/") and content_type.endswith("+json")
    )


def _decode(request: HttpRequest, limit: int):
    """The JSON body, or a response that says what was wrong with it (already recorded)."""
    body, problem = _read_body(request, limit)
    if problem:
        return None, problem
    try:
        return decoding.decode_json(body), None
    except decoding.MalformedJSON as exc:
        return None, _blocked_response(request, reason=exc.reason, http_status=400, errors=exc.errors)


def _read_body(request: HttpRequest, limit: int):
    """The body's bytes as sent (decompressed), or a response that says what was wrong with it
    (already recorded). A signed webhook is checked on these bytes before anything reads them.

    Read as HTTP says (RFC 9110, RFC 8259): a body must say it is JSON (one sent without a
    Content-Type, or as a form, what ``curl -d`` sends unless told otherwise, is refused with 415
    rather than guessed at), in UTF-8 (any other charset: 415), either as it is or gzip-compressed
    (decoded, its decoded size held to the limit; any other Content-Encoding: 415). A chunked body
    (no Content-Length; the server decodes the chunks) is read as it comes. Either way at most
    ``limit`` + 1 bytes are read before a body is refused as too large.
    """
    if not _is_json(request.content_type or ""):
        return None, _blocked_response(
            request,
            reason="unsupported_media_type",
            http_status=415,
            field="Content-Type",
            message="must be application/json",
        )
    charset = request.content_params.get("charset")
    if charset is not None and charset.strip().lower() not in http_bodies.UTF_8:
        return None, _blocked_response(
            request,
            reason="unsupported_charset",
            http_status=415,
            field="Content-Type",
            message="must be UTF-8 (charset=utf-8, or none)",
        )
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding not in ("", "identity", *http_bodies.GZIP):
        return None, _blocked_response(
            request,
            reason="unsupported_encoding",
            http_status=415,
            field="Content-Encoding",
            message="must be gzip, or none",
            headers={"Accept-Encoding": "gzip"},
        )
    declared = request.META.get("CONTENT_LENGTH") or ""
    if declared and not (declared.isascii() and declared.isdigit()):
        # Django's own reading of the body would fail on it.
        return None, _blocked_response(
            request,
            reason="malformed_request",
            http_status=400,
            field="Content-Length",
            message="must be a whole number of bytes",
        )
    chunked = "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
    if chunked and not declared and not request.META.get("wsgi.input_terminated"):
        # runserver (wsgiref) passes the chunks undecoded and cannot say where they end.
        return None, _blocked_response(
            request,
            reason="malformed_request",
            http_status=400,
            field="Transfer-Encoding",
            message="this server cannot read a chunked body: send a Content-Length",
        )
    too_large = {"reason": "too_large", "http_status": 413, "extra": {"limit_bytes": limit}}
    try:
        declared = declared.lstrip("0") or "0"
        if len(declared) > len(str(limit)) or int(declared) > limit:
            raise http_bodies.TooLarge
        body = http_bodies.read_limited(http_bodies.body_stream(request), limit)
        if encoding in http_bodies.GZIP:
            try:
                body = http_bodies.gunzip_limited(body, limit)
            except http_bodies.TooLarge:
                return None, _blocked_response(
                    request, **too_large, message=f"the body, decoded, is larger than the limit of {limit} bytes"
                )
    except http_bodies.TooLarge:
        return None, _blocked_response(
            request, **too_large, message=f"the body is larger than the limit of {limit} bytes"
        )
    except http_bodies.BadGzip:
        return None, _blocked_response(
            request,
            reason="malformed_request",
            http_status=400,
            field="Content-Encoding",
            message="the body is not valid gzip",
        )
    return body, None


@api.post(
    "/events",
    response=EVENT_RESPONSES,
    openapi_extra=_json_body(EVENT_SCHEMA),
    summary="Submit one event: accepted (201), duplicate (200), blocked (409/422/400/413/415)",
)
def submit_event(request):
    raw, problem = _decode(request, settings.OPSCONSOLE_MAX_BODY_BYTES)
    if problem:
        return problem
    return _respond(
        request, submit.submit_event(workspace=request.workspace, raw=raw, source=SOURCE, **_sender(request))
    )


@api.post(
    "/events/batch",
    response=BATCH_RESPONSES,
    summary="Submit up to OPSCONSOLE_MAX_BATCH events; each stands alone",
    openapi_extra=_json_body(
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
def submit_batch(request):
    """Each event is answered in `results` with the `http_status` it would have had alone, and its
    writes are its own: an event that fails leaves nothing, the others stand. An event that fails
    unexpectedly (a server error) is answered `http_status` 500, `status` `error`, and is not
    recorded, so sending it again is safe."""
    raw, problem = _decode(request, settings.OPSCONSOLE_MAX_BATCH_BODY_BYTES)
    if problem:
        return problem
    events = raw.get("events") if isinstance(raw, dict) else None
    if not isinstance(events, list):
        return _blocked_response(
            request, reason="invalid_input", http_status=422, field="events", message="must be a list of events"
        )
    limit = settings.OPSCONSOLE_MAX_BATCH
    if len(events) > limit:
        # Refused whole and recorded nowhere: nothing in it was looked at.
        return answers.respond(answers.batch_too_large(limit), 413)
    results = submit.submit_batch(
        workspace=request.workspace,
        raw_events=events,
        source=SOURCE,
        max_event_bytes=settings.OPSCONSOLE_MAX_BODY_BYTES,
        **_sender(request),
    )
    reveal = any(result.operation is not None for result in results) and _reveals(request)
    return answers.respond(answers.batch_answer(results, reveal=reveal), 200)


@api.get(
    "/operations/{path:key}",
    response=OPERATION_RESPONSES,
    openapi_extra=_RETRY_AFTER,
    summary="One operation of this workspace, by key",
)
def get_operation(request, key: str):
    # A key the database cannot hold (NUL, a lone surrogate) names no operation: not even asked.
    operation = (
        None
        if decoding.storable_text_problem(key)
        else (Operation.objects.select_related("workspace").filter(workspace=request.workspace, key=key).first())
    )
    if operation is None:
        return answers.respond(answers.NO_SUCH_OPERATION, 404)
    return answers.respond(answers.operation_answer(operation, reveal=_reveals(request)), 200)


# --- claims: operations their callers perform (docs/claims.md) ------------------------------------


def _body_of(model) -> dict:
    """A route's body, published as ``model``'s schema (flat: it refers to no component)."""
    return _json_body(model.model_json_schema(ref_template=REF_TEMPLATE))


@api.post(
    "/claims",
    response=claim_answers.CLAIM_RESPONSES,
    openapi_extra=_json_body(CLAIM_SCHEMA),
    summary="Claim an operation you perform: claimed (201, act now), done (200), or why not (409/423)",
)
def claim(request):
    raw, problem = _decode(request, settings.OPSCONSOLE_MAX_BODY_BYTES)
    if problem:
        return problem
    answer = claims.claim(workspace=request.workspace, raw=raw, **_sender(request))
    return claim_answers.claim_response(answer, reveal=_reveals(request))


@api.post(
    "/claims/{path:key}/heartbeat",
    response=claim_answers.HEARTBEAT_RESPONSES,
    openapi_extra=_body_of(reports.Heartbeat),
    summary="Extend the lease of the claim you hold",
)
def heartbeat(request, key: str):
    body, problem = _read(request, reports.Heartbeat)
    if problem:
        return problem
    answer = claims.heartbeat(
        workspace=request.workspace,
        key=key,
        token=body.token,
        lease_seconds=body.lease_seconds,
        actor=request.submitter,
    )
    return claim_answers.claim_response(answer, reveal=_reveals(request))


@api.post(
    "/claims/{path:key}/outcome",
    response=claim_answers.OUTCOME_RESPONSES,
    openapi_extra=_body_of(reports.OutcomeReport),
    summary="Report what your claimed try came to: succeeded, failed (transient or permanent) or unknown",
)
def outcome(request, key: str):
    report, problem = _read(request, reports.OutcomeReport)
    if problem:
        return problem
    answer = reports.report_outcome(workspace=request.workspace, key=key, report=report, actor=request.submitter)
    return claim_answers.claim_response(answer, reveal=_reveals(request))


def _read(request, model):
    """The body as ``model``, or the response refusing it (recorded, as every refused request is)."""
    raw, problem = _decode(request, settings.OPSCONSOLE_MAX_BODY_BYTES)
    if problem:
        return None, problem
    body, errors = reports.read(model, raw)
    if errors:
        return None, _blocked_response(request, reason="invalid_input", http_status=422, errors=errors)
    return body, None


# --- signed webhooks in (ledger.integrations.sources) ------------------------------------------------


@api.post(
    "/hooks/{source}",
    auth=None,
    response=answers.HOOK_RESPONSES,
    openapi_extra=_json_body({"type": "object", "description": "The sender's own body, signed as its scheme says."}),
    summary="A signed webhook of a configured source: taken as an event (201/200), ignored (202), or refused (401)",
)
def receive_hook(request, source: str):
    """No bearer token: the sender signs each delivery with the source's secret instead (Standard
    Webhooks, GitHub or Stripe headers), and the source's rules map its body to an event."""
    found = None if decoding.storable_text_problem(source) else Source.objects.filter(slug=source).first()
    if found is None:
        return answers.respond(answers.NO_SUCH_SOURCE, 404)
    request.workspace, request.person, request.submitter = found.workspace, None, f"source:{found.slug}"
    request.workspace_role = None
    request.delivery_source = Delivery.Source.WEBHOOK
    request.unverified_hook, address = found, client_ip(request)
    try:
        if challenge := sources.answer_challenge(found, request.headers, address=address):
            return answers.respond(answers.Verified(), 200, {"webhook-challenge-response": challenge})
        body, problem = _read_body(request, settings.OPSCONSOLE_MAX_BODY_BYTES)
        if problem:
            return problem
        result = sources.receive(found, body, request.headers, address=address)
    except sources.SecretMissing as exc:
        logger.error("%s", exc)
        unavailable = answers.Unavailable(status="unavailable", detail="This source cannot check signatures yet.")
        return answers.respond(unavailable, 503, {"Retry-After": "60"})
    if result.ignored is not None:
        ignored = answers.Ignored(event=result.ignored.event, delivery_id=result.ignored.delivery.sender_delivery_id)
        return answers.respond(ignored, 202)
    return _respond(request, result.intake)
