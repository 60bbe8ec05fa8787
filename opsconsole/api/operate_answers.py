"""What the management routes answer (docs/api-for-flows.md), as the OpenAPI document publishes it:
an operation as a list shows it and as its own page shows it (attempts, deliveries, conflicts,
decisions, audit trail), what a decision did, the pauses, and every refusal as one of three
bodies by its status: 403 (the token's scope, the person's role, four eyes), 409 (the operation's
state, a stale fingerprint, what changed meanwhile) and 400/413/415/422 (the request itself).
Built as ``opsconsole.api.answers`` builds its own: every body one of these models, dumped.
"""

from collections.abc import Callable
from typing import Any, Literal, cast

from pydantic import Field

from ledger import timed
from ledger.actions import registry
from ledger.core import privacy
from ledger.models import Attempt, AuditEvent, Conflict, Control, Delivery, Operation
from ledger.states import State
from opsconsole.api.answers import (
    Answer,
    FieldProblem,
    MissingScope,
    NotFound,
    OperationAnswer,
    Refused,
    Timestamp,
    Unauthorized,
    Unavailable,
    operation_answer,
)

# --- refusals -------------------------------------------------------------------------------------


ForbiddenReason = Literal["role", "four_eyes", "person_only", "beyond_workspace"]
StateReason = Literal[
    "wrong_state",
    "stale_fingerprint",
    "changed_meanwhile",
    "config_changed",
    "duplicate_risk",
    "held_by_someone_else",
]
InputReason = Literal[
    "invalid_input",
    "sensitive_text",
    "malformed_json",
    "malformed_request",
    "duplicate_key",
    "too_large",
    "unsupported_media_type",
    "unsupported_charset",
    "unsupported_encoding",
]
DoneStatus = Literal[
    "approved", "rejected", "replayed", "succeeded", "resolved", "cancelled", "taken", "released", "unchanged"
]


class Forbidden(Refused):
    """Not for this token's person: they lack the `role` in the workspace, four eyes (`four_eyes`:
    they submitted, changed or replayed it), the route needs a person's token (`person_only`: each
    decision on an operation), or a pause beyond the workspace (`beyond_workspace`). Nothing was done."""

    reason: ForbiddenReason


class StateRefused(Refused):
    """The operation (or conflict, or pause) is not in a state that allows it: `wrong_state`;
    `stale_fingerprint`: the payload changed since the caller saw it (send the current
    `fingerprint` after looking again); `changed_meanwhile`: someone else changed it during the
    request; `config_changed`: its action's configuration changed since it last ran (`changes`;
    replay with `accept_config_change`); `duplicate_risk`: the destination cannot tell whether it
    already acted (replay with `force_unknown` and a reason, or resolve); `held_by_someone_else`:
    another person took it (take with `take_over`). Nothing was done."""

    reason: StateReason
    state: State | None = Field(None, description="The operation's state now, where there is one.")
    changes: list[str] = Field(default_factory=list, description="`config_changed`: what changed, field by field.")


class InputRefused(Refused):
    """The request itself: not JSON (`malformed_json`, `duplicate_key`, `malformed_request`), not
    `application/json` in UTF-8 (415), too large (413), or a field breaks its rule (`invalid_input`,
    each in `errors`; `sensitive_text`: a reason or note quotes a sensitive value of the operation,
    which the audit trail would show to everyone who sees it). Nothing was done."""

    reason: InputReason
    errors: list[FieldProblem]


def forbidden(reason: ForbiddenReason, detail: str) -> Forbidden:
    return Forbidden(reason=reason, detail=detail)


NO_SUCH_CONFLICT = NotFound(detail="No conflict with this id in this workspace.")
NO_SUCH_PAUSE = NotFound(detail="No pause with this id holds this workspace.")

# Each route's refusals, by status; a route adds its own answers. Every route may be refused its
# token (401, 403) or the database (503); a route that acts on something is refused for who asks
# (403) or what it names (404); a route with a body, for the body (400, 413, 415, 422).
READ_REFUSED: dict[int, Any] = {401: Unauthorized, 403: MissingScope, 503: Unavailable}
ACTING_REFUSED: dict[int, Any] = {**READ_REFUSED, 403: MissingScope | Forbidden, 404: NotFound}
BODY_REFUSED: dict[int, Any] = {400: InputRefused, 413: InputRefused, 415: InputRefused, 422: InputRefused}
DECISION_REFUSED: dict[int, Any] = {**ACTING_REFUSED, 409: StateRefused, **BODY_REFUSED}


# --- operations -----------------------------------------------------------------------------------


class OperationItem(OperationAnswer):
    fingerprint: str = Field(
        description="The payload's fingerprint: send it with an approval or rejection, bound to this payload. "
        "`••••` where a field it hashes is sensitive and the token sees it masked (the hash would give it away)."
    )
    summary: str = Field(description="The action's one-line summary of the payload; never a sensitive value.")
    assigned_to: str | None = Field(description="The person who took it, if anyone did.")


class OperationPage(Answer):
    """One page, newest first; `next_cursor` asks for the next (null: this is the last)."""

    operations: list[OperationItem]
    next_cursor: str | None


class DestinationSaid(Answer):
    """What the destination answered a try: a few headers and its body up to 4 KiB, sensitive values
    and secrets masked; `in_full` false: long opaque strings blanked as well."""

    headers: dict[str, str]
    body: str
    in_full: bool


class AttemptAnswer(Answer):
    number: int
    outcome: str = Field(description="ok, transient, permanent, ambiguous, stale, abandoned; empty while it runs.")
    started_at: Timestamp
    finished_at: Timestamp | None
    http_status: int | None
    error_code: str
    error_type: str
    error_message: str
    external_id: str
    said: DestinationSaid | None = Field(description="What the destination answered (null: nothing kept, or hidden).")


class DeliveryAnswer(Answer):
    id: int
    source: str
    outcome: str
    submitted_by: str
    sender_delivery_id: str
    received_at: Timestamp
    errors: list[FieldProblem]


class Difference(Answer):
    field: str
    recorded: Any
    incoming: Any


class ConflictAnswer(Answer):
    id: int
    status: Literal["open", "dismissed", "applied"]
    differences: list[Difference] = Field(description="Masked as the payload is.")
    decided_by: str
    decided_at: Timestamp | None
    created_at: Timestamp


class DecisionAnswer(Answer):
    decision: Literal["approved", "rejected"]
    approver: str
    note: str
    fingerprint: str = Field(description="The payload decided on (masked as the operation's `fingerprint` is).")
    decided_at: Timestamp


class AuditAnswer(Answer):
    id: int
    created_at: Timestamp
    actor: str
    kind: str
    from_state: str
    to_state: str
    message: str = Field(description="Never payload text; its times in ISO 8601, UTC.")


class OperationDetail(OperationItem):
    """The operation with its history, each list oldest first: `tries`, each attempt (`attempts`
    counts them) with what the destination said; the deliveries that carried it; its conflicts;
    the approvals and rejections; the audit trail (its latest 500 events)."""

    tries: list[AttemptAnswer]
    deliveries: list[DeliveryAnswer]
    conflicts: list[ConflictAnswer]
    decisions: list[DecisionAnswer]
    audit: list[AuditAnswer]


AUDIT_LIMIT = 500


def operation_item(operation: Operation, *, reveal: bool) -> OperationItem:
    action = registry.get(operation.action)
    holder = operation.assigned_to
    return OperationItem(
        **operation_answer(operation, reveal=reveal).model_dump(),
        fingerprint=privacy.fingerprint_shown(operation.fingerprint, operation.action, reveal=reveal),
        summary=action.summarise(operation.payload) if action else "",
        assigned_to=holder.get_username() if holder is not None else None,
    )


def operation_detail(operation: Operation, *, reveal: bool, sees_every_answer: bool) -> OperationDetail:
    """``operation`` with its history, masked as ``reveal`` says; the destination's answers in full
    only to whoever configures destinations (``privacy.answer_shown``)."""
    audit = list(operation.audit_events.order_by("-created_at", "-id")[:AUDIT_LIMIT])[::-1]
    approvals = list(operation.approvals.order_by("decided_at", "id"))
    return OperationDetail(
        **operation_item(operation, reveal=reveal).model_dump(),
        tries=[
            _attempt(attempt, sees_every_answer=sees_every_answer)
            for attempt in operation.attempt_rows.order_by("number", "id")
        ],
        deliveries=[_delivery(delivery) for delivery in operation.deliveries.order_by("received_at", "id")],
        conflicts=[
            conflict_answer(conflict, operation, reveal=reveal)
            for conflict in operation.conflicts.order_by("created_at", "id")
        ],
        decisions=[
            DecisionAnswer(
                decision=cast(Literal["approved", "rejected"], approval.decision),
                approver=approval.approver,
                note=approval.note,
                fingerprint=privacy.fingerprint_shown(approval.fingerprint, operation.action, reveal=reveal),
                decided_at=approval.decided_at,
            )
            for approval in approvals
        ],
        audit=[
            _audit(
                event,
                hidden=lambda text: privacy.fingerprints_masked(text, operation.action, reveal=reveal),
            )
            for event in audit
        ],
    )


def _attempt(attempt: Attempt, *, sees_every_answer: bool) -> AttemptAnswer:
    shown = privacy.answer_shown(attempt, configures_destinations=sees_every_answer)
    said = None
    if shown is not None and (shown.body or shown.headers):
        said = DestinationSaid(headers=shown.headers, body=shown.body, in_full=shown.in_full)
    return AttemptAnswer(
        number=attempt.number,
        outcome=attempt.outcome,
        started_at=attempt.started_at,
        finished_at=attempt.finished_at,
        http_status=attempt.http_status,
        error_code=attempt.error_code,
        error_type=attempt.error_type,
        error_message=attempt.error_message,
        external_id=attempt.external_id,
        said=said,
    )


def _delivery(delivery: Delivery) -> DeliveryAnswer:
    return DeliveryAnswer(
        id=delivery.pk,
        source=delivery.source,
        outcome=delivery.outcome,
        submitted_by=delivery.submitted_by,
        sender_delivery_id=delivery.sender_delivery_id,
        received_at=delivery.received_at,
        errors=[
            FieldProblem(field=str(e.get("field", "")), message=str(e.get("message", ""))) for e in delivery.errors
        ],
    )


def _audit(event: AuditEvent, *, hidden: Callable[[str], str]) -> AuditAnswer:
    return AuditAnswer(
        id=event.pk,
        created_at=event.created_at,
        actor=event.actor,
        kind=event.kind,
        from_state=event.from_state,
        to_state=event.to_state,
        message=hidden(timed.as_iso(event.message, event.times)),
    )


def conflict_answer(conflict: Conflict, operation: Operation, *, reveal: bool) -> ConflictAnswer:
    differences = privacy.masked_differences(conflict.differences, operation.action, reveal=reveal)
    return ConflictAnswer(
        id=conflict.pk,
        status=cast(Literal["open", "dismissed", "applied"], conflict.status),
        differences=[
            Difference(field=str(d.get("field", "")), recorded=d.get("recorded"), incoming=d.get("incoming"))
            for d in differences
        ],
        decided_by=conflict.decided_by,
        decided_at=conflict.decided_at,
        created_at=conflict.created_at,
    )


# --- what a decision did --------------------------------------------------------------------------


class ActionDone(Answer):
    """What the decision did (`message` says it in words), and the operation as it is now.
    `succeeded`: a replay or cancel asked the destination first, which has the record, so
    nothing was sent or cancelled; `unchanged`: taking what you hold, giving back what you do
    not hold."""

    status: DoneStatus
    message: str
    operation: OperationItem


class ConflictDone(Answer):
    status: Literal["applied", "dismissed"]
    message: str
    conflict: ConflictAnswer
    operation: OperationItem


# --- pauses ---------------------------------------------------------------------------------------


class Pause(Answer):
    """A pulled pause switch that holds this workspace's work: `global` and an `action` everywhere
    (`workspace` null) are a superuser's; `workspace` (all its actions) and `action` (one action
    in it) this workspace's."""

    id: int
    scope: Literal["global", "workspace", "action"]
    workspace: str | None
    action: str
    reason: str
    paused_since: Timestamp | None
    changed_by: str


class Pauses(Answer):
    pauses: list[Pause]


class Resumed(Answer):
    status: Literal["resumed"] = "resumed"
    message: str
    pause: Pause


def pause_answer(control: Control) -> Pause:
    if control.workspace is None:
        scope: Literal["global", "workspace", "action"] = "action" if control.action else "global"
    else:
        scope = "action" if control.action else "workspace"
    return Pause(
        id=control.pk,
        scope=scope,
        workspace=control.workspace.slug if control.workspace is not None else None,
        action=control.action,
        reason=control.reason,
        paused_since=control.paused_since,
        changed_by=control.changed_by,
    )
