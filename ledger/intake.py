"""Intake: every entry point (HTTP, command line, replay) records an arriving event through here.

parse the envelope -> resolve the action -> validate the payload -> build key and fingerprint ->
one transaction: record the delivery, reserve the key (INSERT .. ON CONFLICT DO NOTHING), audit ->
on commit, nudge the workers.
"""

from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Any

from django.db import transaction
from django.utils import timezone
from pydantic import AwareDatetime, BaseModel, ConfigDict, StrictStr, StringConstraints, ValidationError

from ledger import nudges
from ledger.actions import ActionDefinition, FieldError, UnknownAction, get_action, registry
from ledger.keys import KEY_RECIPE, build_key, canonical_json, fingerprint
from ledger.models import Conflict, Contribution, Delivery, Operation, Workspace
from ledger.services import record_audit_event
from ledger.states import State

Outcome = Delivery.Outcome

# PostgreSQL stores no NUL character in text or jsonb; refused as input rather than failing the insert.
NUL = "\x00"

Label = Annotated[StrictStr, StringConstraints(min_length=1, max_length=200)]


class Envelope(BaseModel):
    """What an automation sends: the action, optional transport metadata, and the business data."""

    model_config = ConfigDict(extra="forbid")

    action: Annotated[StrictStr, StringConstraints(min_length=1, max_length=100)]
    delivery_id: Label | None = None
    correlation_id: Label | None = None
    occurred_at: AwareDatetime | None = None
    data: dict[str, Any]


@dataclass
class IntakeResult:
    outcome: str  # a Delivery.Outcome
    http_status: int
    reason: str = ""
    key: str = ""
    operation: Operation | None = None
    conflict: Conflict | None = None
    errors: list[dict] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    @property
    def blocked(self) -> bool:
        return self.outcome not in (Outcome.ACCEPTED, Outcome.DUPLICATE)

    def as_dict(self) -> dict:
        if not self.blocked:
            return {"status": self.outcome, "key": self.key, "operation": operation_as_dict(self.operation)}
        body = {"status": "blocked", "reason": self.reason}
        if self.key:
            body["key"] = self.key
        if self.conflict:
            body["conflict_id"] = self.conflict.pk
            body["fields"] = [d["field"] for d in self.conflict.differences]
            body["operation"] = operation_as_dict(self.operation)
        if self.errors:
            body["errors"] = self.errors
        return body | self.extra


def operation_as_dict(operation: Operation) -> dict:
    return {
        "id": operation.pk,
        "key": operation.key,
        "workspace": operation.workspace.slug,
        "action": operation.action,
        "state": operation.state,
        "attempts": operation.attempts,
        "result": operation.result,
        "external_id": operation.external_id,
        "last_error": operation.last_error,
        "correlation_id": operation.correlation_id,
        "created_at": operation.created_at.isoformat(),
        "updated_at": operation.updated_at.isoformat(),
    }


def submit_event(*, workspace: Workspace, raw: Any, source: str, submitted_by: str = "",
                 person=None) -> IntakeResult:
    """Record one arriving event (already decoded from JSON) and reserve its operation.

    ``submitted_by`` labels the sender in deliveries and audit events; ``person`` is the user
    behind it, if any (a person's token, ``submit --as``): a person who submits an operation can
    never approve it.
    """
    envelope, action, data, errors = _parse(workspace, raw)
    if errors:
        return record_blocked_delivery(
            workspace=workspace, source=source, submitted_by=submitted_by, person=person,
            reason="invalid_input", errors=errors, http_status=422, raw=raw,
        )
    return _reserve(workspace=workspace, envelope=envelope, action=action, data=data,
                    source=source, submitted_by=submitted_by, person=person)


def submit_batch(*, workspace: Workspace, raw_events: list, source: str, submitted_by: str = "",
                 person=None) -> list[IntakeResult]:
    """Each event stands alone: its own transaction, so one bad event blocks no other."""
    return [submit_event(workspace=workspace, raw=raw, source=source, submitted_by=submitted_by, person=person)
            for raw in raw_events]


def record_blocked_delivery(*, workspace: Workspace, source: str, reason: str, errors: list[dict],
                            http_status: int, submitted_by: str = "", person=None, raw: Any = None,
                            extra: dict | None = None) -> IntakeResult:
    """Record a delivery that cannot become an operation. Keeps its errors, never its content."""
    raw = raw if isinstance(raw, dict) else {}
    Delivery.objects.create(
        workspace=workspace,
        source=source,
        submitted_by=submitted_by,
        person=person,
        action=_label(raw.get("action"), 100),
        delivery_id=_label(raw.get("delivery_id"), 200),
        correlation_id=_label(raw.get("correlation_id"), 200),
        outcome=Outcome.INVALID,
        errors=errors,
    )
    return IntakeResult(outcome=Outcome.INVALID, http_status=http_status, reason=reason,
                        errors=errors, extra=extra or {})


def _label(value, limit: int) -> str:
    return value.replace(NUL, "")[:limit] if isinstance(value, str) else ""


def _nul_errors(raw: dict) -> list[FieldError]:
    """Every field whose name or text holds a NUL character (PostgreSQL cannot store one).

    Walked with an explicit stack: a deeply nested body must not exhaust Python's recursion.
    """
    found = []
    stack = [((), raw)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            for name, item in value.items():
                child = (*path, str(name).replace(NUL, "\\u0000"))
                if NUL in str(name):
                    found.append(FieldError(".".join(child), "must not contain NUL characters"))
                stack.append((child, item))
        elif isinstance(value, list):
            stack.extend(((*path, str(index)), item) for index, item in enumerate(value))
        elif isinstance(value, str) and NUL in value:
            found.append(FieldError(".".join(path), "must not contain NUL characters"))
    return sorted(found, key=lambda error: error.field)


def _parse(workspace, raw) -> tuple[Envelope | None, ActionDefinition | None, dict | None, list[dict]]:
    if not isinstance(raw, dict):
        return None, None, None, [FieldError("body", "must be a JSON object").as_dict()]
    if nul := _nul_errors(raw):
        return None, None, None, [e.as_dict() for e in nul]
    errors: list[FieldError] = []
    envelope = action = data = None
    try:
        envelope = Envelope.model_validate(raw)
    except ValidationError as exc:
        errors += _field_errors(exc)

    action_name = raw.get("action")
    if isinstance(action_name, str) and action_name:
        try:
            action = get_action(action_name)
        except UnknownAction:
            known = ", ".join(sorted(registry))
            errors.append(FieldError("action", f"unknown action {action_name[:100]!r}; known: {known}"))
    if action and isinstance(raw.get("data"), dict):
        try:
            data = action.schema.model_validate(raw["data"]).model_dump(mode="json")
        except ValidationError as exc:
            errors += _field_errors(exc, prefix="data")
        else:
            errors += action.check(workspace, data)
    return envelope, action, data, [e.as_dict() for e in errors]


def _field_errors(exc: ValidationError, prefix: str = "") -> list[FieldError]:
    # Pydantic's messages name the rule, not the value; the submitted input is left out on purpose.
    found = []
    for error in exc.errors(include_input=False, include_url=False):
        path = ".".join(str(part) for part in (prefix, *error["loc"]) if part != "")
        found.append(FieldError(path or "body", _message(error)))
    return found


def _message(error: dict) -> str:
    message = error["msg"]
    return message.removeprefix("Value error, ")


def _reserve(*, workspace, envelope: Envelope, action: ActionDefinition, data: dict, source: str,
             submitted_by: str, person) -> IntakeResult:
    key = build_key(workspace.slug, action.name, [(f, data[f]) for f in action.identity_fields])
    payload_fingerprint = fingerprint(data, action.fingerprint_fields)
    now = timezone.now()
    with transaction.atomic():
        delivery = Delivery.objects.create(
            workspace=workspace, source=source, submitted_by=submitted_by, person=person, action=action.name, key=key,
            delivery_id=envelope.delivery_id or "", correlation_id=envelope.correlation_id or "",
            occurred_at=envelope.occurred_at, outcome=Outcome.ACCEPTED,
        )
        # The database decides who reserves the key: INSERT .. ON CONFLICT DO NOTHING, then read
        # back. The row is ours exactly when its first delivery is the one we just wrote.
        Operation.objects.bulk_create([Operation(
            workspace=workspace, action=action.name, key=key, key_recipe=KEY_RECIPE,
            definition_version=action.version, fingerprint=payload_fingerprint, payload=data,
            first_delivery=delivery, correlation_id=delivery.correlation_id,
            submitted_by=submitted_by, deadline=action.first_deadline(now),
            state=State.PENDING_APPROVAL if action.consequential else State.PENDING,
        )], ignore_conflicts=True)
        operation = Operation.objects.select_related("workspace").get(workspace=workspace, key=key)

        conflict = None
        if operation.first_delivery_id == delivery.pk:
            outcome, http_status = Outcome.ACCEPTED, 201
            record_audit_event(actor=submitted_by or source, kind="reserved", operation=operation,
                               to_state=operation.state, message=f"delivery {delivery.pk} via {source}")
            if person is not None:
                Contribution.objects.create(operation=operation, user=person, kind=Contribution.Kind.SUBMITTED)
            transaction.on_commit(partial(nudges.enqueue_processing, operation.pk))
        elif operation.fingerprint == payload_fingerprint:
            outcome, http_status = Outcome.DUPLICATE, 200
            record_audit_event(actor=submitted_by or source, kind="duplicate_delivery",
                               operation=operation, message=f"delivery {delivery.pk} via {source}")
        else:
            outcome, http_status = Outcome.CONFLICT, 409
            conflict = Conflict.objects.create(
                operation=operation, delivery=delivery, incoming_fingerprint=payload_fingerprint,
                incoming_payload=data, differences=_differences(operation.payload, data, action),
            )
            fields = ", ".join(d["field"] for d in conflict.differences)
            record_audit_event(actor=submitted_by or source, kind="conflict_detected",
                               operation=operation, message=f"conflict {conflict.pk}: {fields} differ")
        delivery.operation = operation
        delivery.outcome = outcome
        delivery.save(update_fields=["operation", "outcome"])

    return IntakeResult(outcome=outcome, http_status=http_status, key=key, operation=operation,
                        conflict=conflict, reason="payload_conflict" if conflict else "")


def _differences(recorded: dict, incoming: dict, action: ActionDefinition) -> list[dict]:
    return [
        {"field": name, "recorded": recorded.get(name), "incoming": incoming.get(name)}
        for name in action.fingerprint_fields
        if canonical_json(recorded.get(name)) != canonical_json(incoming.get(name))
    ]
