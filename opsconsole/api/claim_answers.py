"""What the claims routes answer (docs/claims.md), as the OpenAPI document publishes it: one model
per answer, built from what ``ledger.callers`` returns, with its HTTP status and headers. Every
body carries ``status``: what the caller should do. Refusals of the request itself are intake's
answers (``status`` ``blocked``, with a ``reason``), as ``/events`` sends them.
"""

from typing import Literal, TypeVar, cast

from django.http import HttpResponse
from pydantic import Field

from ledger.callers import claims, reports
from ledger.states import State
from opsconsole.api import answers
from opsconsole.api.answers import (
    REFUSED,
    Answer,
    BatchTooLarge,
    InvalidInput,
    LastError,
    NotFound,
    OperationAnswer,
    PayloadConflict,
    Stale,
    Timestamp,
    TooLarge,
    intake_answer,
    last_error_of,
    operation_answer,
    respond,
)

T = TypeVar("T")
DeferredStatus = Literal["in_progress", "retry_later", "waiting"]
DecidedStatus = Literal["awaiting_approval", "needs_review", "unknown", "cancelled", "rejected", "superseded"]


class Claimed(Answer):
    """Act now: the claim is yours until `lease_expires_at` (heartbeat to extend it); send
    `idempotency_key` to the destination if it honours one (the same on every attempt), then
    report the outcome with `token`."""

    status: Literal["claimed"] = "claimed"
    key: str
    token: str = Field(description="The claim's token: send it with the heartbeats and the outcome.")
    attempt: int = Field(description="The try this claim begins (1 for the first).")
    lease_expires_at: Timestamp
    idempotency_key: str
    data: dict = Field(
        description="The operation's data, in full (you perform it, so you send what it says; a claim "
        "by key is how you learn it)."
    )
    operation: OperationAnswer


class Done(Answer):
    """Already performed: do not act; `result` and `external_id` are what was recorded."""

    status: Literal["done"] = "done"
    key: str
    result: dict | None
    external_id: str
    operation: OperationAnswer


class Deferred(Answer):
    """Do not act now; claim again after `retry_after` seconds (also the `Retry-After` header):
    another caller holds the claim (`in_progress`), a reported transient failure's next try is not
    due (`retry_later`), or an earlier version of the request has not finished (`waiting`)."""

    status: DeferredStatus
    key: str
    message: str
    retry_after: int
    lease_expires_at: Timestamp | None
    next_attempt_at: Timestamp | None
    last_error: LastError | None
    operation: OperationAnswer


class Held(Answer):
    """A pause holds the action in this workspace: do not act; claim again later."""

    status: Literal["held"] = "held"
    key: str
    message: str
    retry_after: int
    scope: str = Field(description="What the pause covers: `global`, `workspace <slug>`, `action <name>` or both.")
    reason: str = Field(description="Why it was paused, as the person who paused it said.")
    operation: OperationAnswer


class Decided(Answer):
    """Nobody may act on the caller's word alone: a person approves (`awaiting_approval`), a person
    or reconciliation decides (`needs_review`, `unknown`), or it is over (`cancelled`, `rejected`,
    `superseded`)."""

    status: DecidedStatus
    key: str
    message: str
    last_error: LastError | None
    operation: OperationAnswer


class StaleToken(Answer):
    """The token is not the claim the operation is held by (taken over, decided, its lease expired,
    or never issued): nothing changed; do not act on this claim any more."""

    status: Literal["stale_token"] = "stale_token"
    key: str
    message: str
    state: State


class Extended(Answer):
    status: Literal["extended"] = "extended"
    key: str
    lease_expires_at: Timestamp


class Recorded(Answer):
    """The outcome is recorded (or was, by the same report before): the operation's state now."""

    status: Literal["recorded"] = "recorded"
    key: str
    message: str
    state: State
    next_attempt_at: Timestamp | None
    operation: OperationAnswer


class OutcomeConflict(Answer):
    """This claim already reported a different outcome: nothing changed."""

    status: Literal["outcome_conflict"] = "outcome_conflict"
    key: str
    message: str


CLAIM_RESPONSES = {
    201: Claimed,
    200: Done,
    404: NotFound,  # a claim by key of no operation of the workspace
    409: Deferred | Decided | PayloadConflict | Stale,
    413: TooLarge,
    423: Held,
    **REFUSED,
}
HEARTBEAT_RESPONSES = {200: Extended, 404: NotFound, 409: StaleToken, 413: TooLarge, **REFUSED}
OUTCOME_RESPONSES = {200: Recorded, 404: NotFound, 409: StaleToken | OutcomeConflict, 413: TooLarge, **REFUSED}

_DEFERRED = {claims.IN_PROGRESS, claims.RETRY_LATER, claims.WAITING}


def claim_response(answer: claims.Answer, *, reveal: bool) -> HttpResponse:
    """The HTTP response to a claim, heartbeat or outcome report answered ``answer``."""
    body, status = claim_body(answer, reveal=reveal)
    headers = {"Retry-After": str(answer.retry_after)} if answer.retry_after is not None else None
    return respond(body, status, headers)


def claim_body(answer: claims.Answer, *, reveal: bool) -> tuple[Answer, int]:
    """The body and HTTP status of a claim, heartbeat or outcome report answered ``answer``."""
    if answer.status == claims.BLOCKED:
        refused = _given(answer.intake, "refusal")
        return intake_answer(refused, reveal=reveal), refused.http_status
    if answer.status == claims.NOT_FOUND:
        return answers.NO_SUCH_OPERATION, 404
    return _body(answer, reveal=reveal)


# A claim's answer in a batch, by the answer it would have had alone (``answers.batch_item``).
_ITEMS: dict[type[Answer], type[Answer]] = {
    model: answers.batch_item(model, status)
    for model, status in (
        (Claimed, 201),
        (Done, 200),
        (NotFound, 404),
        (Deferred, 409),
        (Decided, 409),
        (PayloadConflict, 409),
        (Stale, 409),
        (Held, 423),
        (InvalidInput, 422),
        (TooLarge, 413),
    )
}


class ClaimBatchAnswer(Answer):
    """Each claim's answer, in order: its `index`, the `http_status` it would have had alone, then
    that answer (a `claimed` one carries its token; only those say act)."""

    results: list[  # type: ignore[valid-type]  # the models of _ITEMS, built above
        _ITEMS[Claimed]
        | _ITEMS[Done]
        | _ITEMS[NotFound]
        | _ITEMS[Deferred]
        | _ITEMS[Decided]
        | _ITEMS[PayloadConflict]
        | _ITEMS[Stale]
        | _ITEMS[Held]
        | _ITEMS[InvalidInput]
        | _ITEMS[TooLarge]
    ]


CLAIM_BATCH_RESPONSES = {200: ClaimBatchAnswer, 413: TooLarge | BatchTooLarge, **REFUSED}


def claim_batch_answer(answered: list[claims.Answer], *, reveal: bool) -> ClaimBatchAnswer:
    """Each claim's answer as the single route gives it, with its index and status."""
    items = []
    for index, answer in enumerate(answered):
        body, status = claim_body(answer, reveal=reveal)
        items.append(_ITEMS[type(body)].model_validate({"index": index, "http_status": status, **dict(body)}))
    return ClaimBatchAnswer(results=items)


def _body(answer: claims.Answer, *, reveal: bool) -> tuple[Answer, int]:
    operation, status = _given(answer.operation, "operation"), answer.status
    shown = operation_answer(operation, reveal=reveal)
    key = operation.key
    if status == claims.CLAIMED:
        attempt = _given(answer.attempt, "attempt")
        return Claimed(
            key=key,
            token=answer.token,
            attempt=attempt.number,
            lease_expires_at=_given(operation.lease_expires_at, "lease"),
            idempotency_key=attempt.idempotency_key,
            data=operation.payload or {},
            operation=shown,
        ), 201
    if status == claims.DONE:
        return Done(key=key, result=shown.result, external_id=operation.external_id, operation=shown), 200
    if status in _DEFERRED:
        return Deferred(
            key=key,
            status=cast(DeferredStatus, status),
            message=answer.message,
            retry_after=_given(answer.retry_after, "retry_after"),
            lease_expires_at=operation.lease_expires_at,
            next_attempt_at=operation.next_attempt_at,
            last_error=last_error_of(operation),
            operation=shown,
        ), 409
    if status == claims.HELD:
        switch = _given(answer.held_by, "pause switch")
        return Held(
            key=key,
            message=answer.message,
            retry_after=_given(answer.retry_after, "retry_after"),
            scope=switch.scope_label,
            reason=switch.reason,
            operation=shown,
        ), 423
    if status == claims.EXTENDED:
        return Extended(key=key, lease_expires_at=_given(operation.lease_expires_at, "lease")), 200
    if status == claims.STALE_TOKEN:
        return StaleToken(key=key, message=answer.message, state=State(operation.state)), 409
    if status == reports.RECORDED:
        return Recorded(
            key=key,
            message=answer.message,
            state=State(operation.state),
            next_attempt_at=operation.next_attempt_at,
            operation=shown,
        ), 200
    if status == reports.OUTCOME_CONFLICT:
        return OutcomeConflict(key=key, message=answer.message), 409
    return Decided(
        key=key,
        status=cast(DecidedStatus, status),
        message=answer.message,
        last_error=last_error_of(operation),
        operation=shown,
    ), 409


def _given(value: T | None, what: str) -> T:
    """What the answer's status promises it carries (a claimed answer's attempt and lease...):
    without it, the answer is not built, and so never sent."""
    if value is None:
        raise ValueError(f"a claim's answer lacks its {what}")
    return value
