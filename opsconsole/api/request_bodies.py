"""The bodies of the management routes: read as the event routes read theirs (JSON in UTF-8, gzip
or not, within a size limit, no key twice: ``http_bodies``, ``ledger.intake.decoding``), then
as a pydantic model, and refused whole with the reason as an ``InputRefused`` answer. Unlike an
event's, a refused management request is no arrival of work: it is answered, not recorded."""

from typing import Any, cast

from django.conf import settings
from ninja.openapi.schema import REF_TEMPLATE
from pydantic import BaseModel, ConfigDict, Field

from ledger.callers import reports
from ledger.intake import decoding
from opsconsole.api import http_bodies
from opsconsole.api.answers import FieldProblem
from opsconsole.api.operate_answers import InputReason, InputRefused
from opsconsole.api.problems import ApiProblem


class ReasonBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(
        max_length=500,
        pattern=r"\S",
        description="Why (required): kept in the audit trail and shown to the workspace, so never a sensitive value.",
    )


def read_body(request, model: type[BaseModel], *, optional: bool = False) -> Any:
    """The request's body as ``model``; with ``optional``, an empty body is ``model()``."""
    if optional and not _has_body(request):
        return model()
    try:
        raw = decoding.decode_json(http_bodies.read_body(request, settings.OPSCONSOLE_MAX_BODY_BYTES))
    except decoding.MalformedJSON as exc:
        raise _refused(400, cast(InputReason, exc.reason), exc.errors) from None
    except ApiProblem as problem:  # the bytes themselves: not JSON, too large, another encoding
        raise _refused(problem.status, cast(InputReason, problem.reason), problem.errors, problem.headers) from None
    body, errors = reports.read(model, raw)
    if errors:
        raise _refused(422, "invalid_input", errors)
    return body


def _has_body(request) -> bool:
    length = request.META.get("CONTENT_LENGTH") or ""
    return length not in ("", "0") or "chunked" in request.headers.get("Transfer-Encoding", "").lower()


def field_refused(field: str, message: str) -> ApiProblem:
    """A management request refused 422 for one field (a body's or a query's), as ``read_body`` refuses."""
    return _refused(422, "invalid_input", [{"field": field, "message": message}])


def _refused(status: int, reason: InputReason, errors: list[dict], headers: dict | None = None) -> ApiProblem:
    problems = [FieldProblem(field=str(e.get("field", "body")), message=str(e.get("message", ""))) for e in errors]
    detail = "; ".join(f"{problem.field}: {problem.message}" for problem in problems) or reason
    answer = InputRefused(reason=reason, detail=detail, errors=problems)
    return ApiProblem(status, answer=answer, headers=headers)


# What a 503 says besides its body (opsconsole.middleware).
RETRY_AFTER = {
    "responses": {
        503: {
            "headers": {
                "Retry-After": {"description": "Seconds to wait before sending again.", "schema": {"type": "integer"}}
            }
        }
    }
}


def schema_body(schema: dict, *, required: bool = True) -> dict:
    """A route's ``openapi_extra``: its JSON body published as ``schema``, and its 503's header."""
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": schema}}}} | RETRY_AFTER


def json_body(model: type[BaseModel], *, required: bool = True) -> dict:
    """A route's ``openapi_extra``: its body published as ``model``'s schema (flat: no component)."""
    return schema_body(model.model_json_schema(ref_template=REF_TEMPLATE), required=required)
