"""HTTP API under /api/v1/ (django-ninja). Thin: authenticate, decode, call intake, report.

Bodies are decoded here rather than by ninja so that every failure keeps the ledger's own shape
(``{"status": "blocked", "reason": ...}``) and every arrival, malformed ones too, is recorded.
"""

import json

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError
from ninja.security import HttpBearer

from ledger import intake
from ledger.intake import Envelope, IntakeResult
from ledger.models import Delivery, Operation
from ledger.services import authenticate_token


class WorkspaceToken(HttpBearer):
    def authenticate(self, request, token):
        api_token = authenticate_token(token)
        if api_token is not None:
            request.workspace = api_token.workspace
            # A person's token submits as that person (who then cannot approve what they sent).
            request.person = api_token.user
            request.submitter = api_token.user.get_username() if api_token.user else f"token:{api_token.hint}"
        return api_token


api = NinjaAPI(title="opsconsole", version="1", urls_namespace="api-v1", auth=WorkspaceToken())

SOURCE = Delivery.Source.API


@api.exception_handler(AuthenticationError)
def unauthorized(request, exc):
    return JsonResponse(
        {"status": "unauthorized", "detail": "A valid workspace token is required: Authorization: Bearer <token>."},
        status=401,
    )


def _blocked_response(request, *, reason: str, message: str, http_status: int, field: str = "body",
                      extra: dict | None = None) -> JsonResponse:
    result = intake.record_blocked_delivery(
        workspace=request.workspace, source=SOURCE, **_sender(request), reason=reason,
        errors=[{"field": field, "message": message}], http_status=http_status, extra=extra,
    )
    return _respond(result)


def _respond(result: IntakeResult) -> JsonResponse:
    return JsonResponse(result.as_dict(), status=result.http_status)


def _sender(request) -> dict:
    """Who sent the request, as intake records it: the label and the person (if the token is one's)."""
    return {"submitted_by": request.submitter, "person": request.person}


def _decode(request: HttpRequest, limit: int):
    """The JSON body, or a JsonResponse that says what was wrong with it (already recorded)."""
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if (declared.isdigit() and int(declared) > limit) or len(request.body) > limit:
        return None, _blocked_response(
            request, reason="too_large", http_status=413, extra={"limit_bytes": limit},
            message=f"the body is larger than the limit of {limit} bytes",
        )
    try:
        return json.loads(request.body), None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        message = f"malformed JSON: {exc}"
    except RecursionError:
        message = "malformed JSON: nested too deeply"
    return None, _blocked_response(request, reason="malformed_json", http_status=400, message=message)


_event_body = {"content": {"application/json": {"schema": Envelope.model_json_schema()}}, "required": True}


@api.post("/events", openapi_extra={"requestBody": _event_body},
          summary="Submit one event: accepted (201), duplicate (200), blocked (409/422/400/413)")
def submit_event(request):
    raw, problem = _decode(request, settings.OPSCONSOLE_MAX_BODY_BYTES)
    if problem:
        return problem
    return _respond(intake.submit_event(
        workspace=request.workspace, raw=raw, source=SOURCE, **_sender(request)
    ))


_batch_body = {"content": {"application/json": {"schema": {
    "type": "object", "required": ["events"],
    "properties": {"events": {"type": "array", "items": Envelope.model_json_schema()}},
}}}, "required": True}


@api.post("/events/batch", openapi_extra={"requestBody": _batch_body},
          summary="Submit up to OPSCONSOLE_MAX_BATCH events; each stands alone")
def submit_batch(request):
    raw, problem = _decode(request, settings.OPSCONSOLE_MAX_BATCH_BODY_BYTES)
    if problem:
        return problem
    events = raw.get("events") if isinstance(raw, dict) else None
    if not isinstance(events, list):
        return _blocked_response(request, reason="invalid_input", http_status=422, field="events",
                                 message="must be a list of events")
    limit = settings.OPSCONSOLE_MAX_BATCH
    if len(events) > limit:
        # Refused whole and recorded nowhere: nothing in it was looked at.
        return JsonResponse({"status": "blocked", "reason": "batch_too_large", "limit": limit,
                             "errors": [{"field": "events", "message": f"at most {limit} events per batch"}]},
                            status=413)
    results = []
    for index, event in enumerate(events):
        result = _submit_batch_item(request, event)
        results.append({"index": index, "http_status": result.http_status, **result.as_dict()})
    return JsonResponse({"results": results}, status=200)


def _submit_batch_item(request, event) -> IntakeResult:
    size = len(json.dumps(event, ensure_ascii=False).encode("utf-8"))
    limit = settings.OPSCONSOLE_MAX_BODY_BYTES
    if size > limit:
        return intake.record_blocked_delivery(
            workspace=request.workspace, source=SOURCE, **_sender(request), reason="too_large",
            errors=[{"field": "body", "message": f"the event is larger than the limit of {limit} bytes"}],
            http_status=413, raw=event, extra={"limit_bytes": limit},
        )
    return intake.submit_event(workspace=request.workspace, raw=event, source=SOURCE,
                               **_sender(request))


@api.get("/operations/{key}", summary="One operation of this workspace, by key")
def get_operation(request, key: str):
    operation = (
        Operation.objects.select_related("workspace").filter(workspace=request.workspace, key=key).first()
    )
    if operation is None:
        return JsonResponse({"status": "not_found", "detail": f"No operation with key {key!r} in this workspace."},
                            status=404)
    return JsonResponse(intake.operation_as_dict(operation))
