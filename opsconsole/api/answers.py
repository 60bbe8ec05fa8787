"""What the API answers, as the OpenAPI document publishes it: one pydantic model per answer, and
the functions that build each answer from what the ledger returns (an ``IntakeResult``, an
``Operation``, a refusal that never reached intake).

Every JSON body the API sends is one of these models, instantiated and dumped: a body the document
does not describe cannot be built (``extra="forbid"``, and each field's type checked as it is built),
so the published schema and the bodies cannot drift apart. The routes (``opsconsole.api.endpoints``),
the 404 handler (``opsconsole.errors``) and the 503 middleware (``opsconsole.middleware``) answer
through ``respond``; ``manage.py submit`` prints ``intake_body`` so its lines read as the API's.
"""

from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from django.http import HttpResponse
from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, WithJsonSchema, create_model

from ledger.core import privacy
from ledger.intake.submit import IntakeResult, Outcome
from ledger.models import Operation
from ledger.states import State


def _without_defaults(schema: dict) -> None:
    """A default is the ``status`` an answer class fixes, a convenience for building it: every body
    carries its status, so the document lists it as required and publishes no default."""
    for field in schema.get("properties", {}).values():
        field.pop("default", None)


class Answer(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_serialization_defaults_required=True, json_schema_extra=_without_defaults
    )


def respond(answer: Answer, status: int, headers: dict | None = None) -> HttpResponse:
    """The HTTP response whose body is ``answer``, with ``status`` and any ``headers``. Its JSON is
    written by pydantic in one step, as the document publishes it (compact, UTF-8): not dumped to
    Python values first and encoded again (what a JsonResponse of ``model_dump`` did)."""
    return HttpResponse(answer.model_dump_json(), status=status, headers=headers, content_type="application/json")


# A time as Python's isoformat writes it (`2025-12-03T08:00:00.123456+00:00`, the form the API has
# always sent), published as a JSON Schema date-time.
Timestamp = Annotated[
    datetime,
    PlainSerializer(datetime.isoformat, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


class FieldProblem(Answer):
    field: str = Field(description="The field (dotted path), or `body`, `events`, `Content-Type`.")
    message: str = Field(description="The rule broken; never the submitted value.")


class LastError(Answer):
    category: str
    message: str


class OperationAnswer(Answer):
    id: int
    key: str
    workspace: str
    action: str
    state: State
    attempts: int
    payload: dict[str, Any] = Field(
        description=(
            f"The business fields; the action's sensitive fields read `{privacy.MASK}` unless the token is a person's "
            f"who may see sensitive values in the workspace (approver, admin); erased values read `{privacy.REDACTED}`."
        )
    )
    result: dict[str, Any] | None
    external_id: str
    last_error: LastError | None
    correlation_id: str
    created_at: Timestamp
    updated_at: Timestamp


class Accepted(Answer):
    status: Literal["accepted"] = "accepted"
    key: str
    operation: OperationAnswer


class Duplicate(Accepted):
    status: Literal["duplicate"] = "duplicate"  # type: ignore[assignment]  # pydantic narrows a field


class PayloadConflict(Answer):
    status: Literal["blocked"] = "blocked"
    reason: Literal["payload_conflict"]
    key: str
    conflict_id: int
    fields: list[str] = Field(description="The business fields that differ from the recorded payload.")
    operation: OperationAnswer


class Blocked(Answer):
    status: Literal["blocked"] = "blocked"
    reason: str  # each refusal lists its own
    errors: list[FieldProblem]


class Stale(Blocked):
    """The event says it occurred longer ago than its action's key window (docs/retention.md): it
    is recorded, and not taken, since whether it was already handled can no longer be told."""

    reason: Literal["stale"]
    key: str


class InvalidInput(Blocked):
    reason: Literal["invalid_input"]


class MalformedBody(Blocked):
    """`duplicate_key`: a key appears twice in one object; each `errors` entry names its path
    (`data.version`, `events[3].data`)."""

    reason: Literal["malformed_json", "malformed_request", "duplicate_key"]


class TooLarge(Blocked):
    """A body, or one event of a batch, larger than the limit: recorded, its content not kept."""

    reason: Literal["too_large"]
    limit_bytes: int = Field(description="The body limit in bytes.")


class BatchTooLarge(Blocked):
    """A batch of more events than a batch may hold: refused whole, nothing in it looked at or recorded."""

    reason: Literal["batch_too_large"]
    limit: int = Field(description="The most events a batch may hold.")


class UnsupportedMediaType(Blocked):
    """Not `application/json` (or `+json`), a charset other than UTF-8, or a Content-Encoding other
    than gzip (answered with `Accept-Encoding: gzip`)."""

    reason: Literal["unsupported_media_type", "unsupported_charset", "unsupported_encoding"]


class SignatureRefused(Blocked):
    """A signed webhook (``/hooks/{source}``) whose signature is missing, matches none of the
    source's secrets, or was made too long ago (`stale_timestamp`): counted per client address,
    never its body (anyone can send one, so none is a delivery of its own)."""

    reason: Literal["missing_signature", "bad_signature", "stale_timestamp"]


class Ignored(Answer):
    """A signed webhook of an event type no rule of the source maps: recorded, nothing to do."""

    status: Literal["ignored"] = "ignored"
    event: str = Field(description="The sender's event type.")
    delivery_id: str


class Verified(Answer):
    """An endpoint verification challenge (Standard Webhooks' `webhook-challenge`), answered in the
    `webhook-challenge-response` header."""

    status: Literal["verified"] = "verified"


class Failed(Answer):
    status: Literal["error"] = "error"
    reason: Literal["internal_error"]
    errors: list[FieldProblem]


class Unauthorized(Answer):
    status: Literal["unauthorized"] = "unauthorized"
    detail: str


class NotFound(Answer):
    status: Literal["not_found"] = "not_found"
    detail: str


class Refused(Answer):
    """A request refused before anything was done: `reason` says which rule, `detail` in words."""

    status: Literal["refused"] = "refused"
    reason: str
    detail: str = Field(description="Why, in words a person can act on.")


class MissingScope(Refused):
    """The token lacks the `scope` this route needs (`events`, `claims`, `read`, `operate` or
    `approve`; docs/api-for-flows.md): nothing was done or recorded."""

    reason: Literal["missing_scope"]
    scope: str


class Unavailable(Answer):
    """The database cannot be reached (`unavailable`), or it aborted this request's transaction for
    a deadlock or a serialization failure, again when run again (`busy`): nothing of the request
    was kept (opsconsole.middleware). Retry after `Retry-After` seconds."""

    status: Literal["unavailable", "busy"]
    detail: str


def batch_item(answer: type[Answer], status: int) -> type[Answer]:
    """A batch result: the event's (or claim's) position and the status it would have had alone, then its answer
    (the fields of the later base come first)."""
    # The status is a value known only here: pydantic takes it as a type, mypy cannot.
    http_status: Any = (Literal[status], ...)
    position = create_model(f"Item{status}", __base__=Answer, index=(int, ...), http_status=http_status)
    return create_model(f"{answer.__name__}Item", __base__=(answer, position))


# An event's answer in a batch, by the answer it would have had alone.
_ITEMS: dict[type[Answer], type[Answer]] = {
    answer: batch_item(answer, status)
    for answer, status in (
        (Accepted, 201),
        (Duplicate, 200),
        (PayloadConflict, 409),
        (Stale, 409),
        (InvalidInput, 422),
        (TooLarge, 413),
        (Failed, 500),
    )
}


class BatchAnswer(Answer):
    results: list[  # type: ignore[valid-type]  # the models of _ITEMS, built above
        _ITEMS[Accepted]
        | _ITEMS[Duplicate]
        | _ITEMS[PayloadConflict]
        | _ITEMS[Stale]
        | _ITEMS[InvalidInput]
        | _ITEMS[TooLarge]
        | _ITEMS[Failed]
    ]


# What each route answers, by status: the document's `responses`.
REFUSED = {
    400: MalformedBody,
    401: Unauthorized,
    403: MissingScope,
    415: UnsupportedMediaType,
    422: InvalidInput,
    503: Unavailable,
}
EVENT_RESPONSES = {201: Accepted, 200: Duplicate, 409: PayloadConflict | Stale, 413: TooLarge, **REFUSED}
BATCH_RESPONSES = {200: BatchAnswer, 413: TooLarge | BatchTooLarge, **REFUSED}
# A signed webhook takes no token, so no scope refuses it.
HOOK_RESPONSES = {
    **{status: answer for status, answer in EVENT_RESPONSES.items() if status != 403},
    200: Duplicate | Verified,
    202: Ignored,
    401: SignatureRefused,
    404: NotFound,
}


# --- built from the ledger's results --------------------------------------------------------------


def operation_answer(operation: Operation, *, reveal: bool) -> OperationAnswer:
    """The operation as the API shows it: its sensitive values masked unless ``reveal``
    (``privacy.may_view_sensitive``)."""
    return OperationAnswer(
        id=operation.pk,
        key=operation.key,
        workspace=operation.workspace.slug,
        action=operation.action,
        state=State(operation.state),
        attempts=operation.attempts,
        payload=privacy.masked(operation.payload, operation.action, reveal=reveal),
        result=privacy.masked(operation.result, operation.action, reveal=reveal),
        external_id=operation.external_id,
        last_error=last_error_of(operation),
        correlation_id=operation.correlation_id,
        created_at=operation.created_at,
        updated_at=operation.updated_at,
    )


def last_error_of(operation: Operation) -> LastError | None:
    error = operation.last_error
    return LastError(**error) if error is not None else None


# The refusals by the reason intake gives, read from each model's own `reason`.
_REFUSALS: dict[str, type[Answer]] = {
    reason: model
    for model in (
        PayloadConflict,
        Stale,
        InvalidInput,
        MalformedBody,
        TooLarge,
        UnsupportedMediaType,
        SignatureRefused,
        Failed,
    )
    for reason in get_args(model.model_fields["reason"].annotation)
}
_TAKEN: dict[str, type[Answer]] = {Outcome.ACCEPTED: Accepted, Outcome.DUPLICATE: Duplicate}


def intake_answer(result: IntakeResult, *, reveal: bool = False) -> Answer:
    """The answer to one event; the operation's sensitive values shown only with ``reveal``."""
    model, fields = _answer_of(result, reveal=reveal)
    return model(**fields)


def intake_body(result: IntakeResult, *, reveal: bool = False) -> dict:
    """``intake_answer`` as JSON data: what the API sends, and what ``manage.py submit`` prints."""
    return intake_answer(result, reveal=reveal).model_dump(mode="json")


def batch_answer(results: list[IntakeResult], *, reveal: bool = False) -> BatchAnswer:
    """Each event's answer in order, with its index and the status it would have had alone."""
    items = []
    for index, result in enumerate(results):
        model, fields = _answer_of(result, reveal=reveal)
        items.append(_ITEMS[model].model_validate({"index": index, "http_status": result.http_status, **fields}))
    return BatchAnswer(results=items)


def _answer_of(result: IntakeResult, *, reveal: bool) -> tuple[type[Answer], dict]:
    """The answer's model and its fields. A result the model does not describe (a reason it does
    not list, a field it does not have) fails to build: it is never sent."""
    operation = operation_answer(result.operation, reveal=reveal) if result.operation is not None else None
    if result.outcome in _TAKEN:
        return _TAKEN[result.outcome], {"key": result.key, "operation": operation}
    fields = {"reason": result.reason, **result.extra}
    if result.key:
        fields["key"] = result.key
    if result.conflict is not None:
        fields |= {
            "conflict_id": result.conflict.pk,
            "operation": operation,
            "fields": [difference["field"] for difference in result.conflict.differences],
        }
    if result.errors:
        fields["errors"] = result.errors
    model = _REFUSALS.get(result.reason)
    if model is None:
        raise ValueError(f"no published answer for the reason {result.reason!r}")
    return model, fields


# --- refusals that never reach intake -------------------------------------------------------------


def batch_too_large(limit: int, *, items: str = "events") -> BatchTooLarge:
    return BatchTooLarge(
        reason="batch_too_large",
        limit=limit,
        errors=[FieldProblem(field=items, message=f"at most {limit} {items} per batch")],
    )


UNAUTHORIZED = Unauthorized(detail="A valid workspace token is required: Authorization: Bearer <token>.")
NO_SUCH_OPERATION = NotFound(detail="No operation with this key in this workspace.")
NO_SUCH_RESOURCE = NotFound(detail="No such resource in this API.")
# An error no route answered (logged with its traceback and the request id): safe to retry.
INTERNAL_ERROR = Failed(reason="internal_error", errors=[])
NO_SUCH_SOURCE = NotFound(detail="No webhook source has this name.")
