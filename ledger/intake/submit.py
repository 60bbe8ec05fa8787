"""Intake: every entry point (HTTP, command line, replay) records an arriving event through here.

decode the JSON (``ledger.intake.decoding``) -> parse the envelope, resolve the action, validate the
payload (``ledger.intake.envelope``) -> build key and fingerprint -> one transaction for all the
events of a request: reserve the keys (INSERT .. ON CONFLICT DO NOTHING RETURNING), record the
deliveries, audit, wake the workers (``ledger.intake.reservation``).

Whatever arrives is answered on purpose: JSON Python cannot read (numbers too long to convert,
nesting too deep) is malformed, and text or times the database cannot store (NUL, unpaired
surrogates, offsets beyond ±15:59, implausible dates) are invalid input naming the field.
"""

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.utils import timezone

from ledger.actions import ActionDefinition, FieldError
from ledger.core import contention, policies
from ledger.core.accounts import TokenChanged
from ledger.intake import ordering, reservation
from ledger.intake.decoding import storable
from ledger.intake.envelope import Envelope, InvalidEvent, parse
from ledger.keys import build_key, fingerprint
from ledger.models import Conflict, Delivery, Operation, Ordering, Workspace

Outcome = Delivery.Outcome
# Not a delivery outcome: a batch event that failed unexpectedly, rolled back, so nothing was recorded.
FAILED = "failed"

logger = logging.getLogger("ledger")


@dataclass
class IntakeResult:
    """What became of one arriving event. Its answer to the sender (the API's body, the line
    ``manage.py submit`` prints) is built by ``opsconsole.api.answers``: intake knows no transport."""

    outcome: str  # a Delivery.Outcome, or FAILED
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


def submit_event(
    *, workspace: Workspace, raw: Any, source: str, submitted_by: str = "", person=None, token: dict | None = None
) -> IntakeResult:
    """Record one arriving event (already decoded from JSON) and reserve its operation.

    ``submitted_by`` labels the sender in deliveries and audit events; ``person`` is the user
    behind it, if any (a person's token, ``submit --as``): a person who submits an operation can
    never approve it. ``token``: a cached API token to check as the reservation writes
    (``reservation.reserve``); ``accounts.TokenChanged`` when it changed, nothing written.
    """
    sender = {"source": source, "submitted_by": submitted_by, "person": person}
    [result] = _submit(workspace, [raw], sender=sender, token=token)
    return result


def prepared_event(workspace: Workspace, raw: Any) -> reservation.Event | None:
    """The event ``raw`` validated, keyed and marked, ready for ``ledger_reserve_one`` (a claim
    reserves it in its own call: ``ledger.callers.claiming``); None when intake would refuse it
    (invalid, too old for its key window) or reserve it otherwise (versions under latest_wins, one at
    a time): ``submit_event`` records and answers those."""
    try:
        envelope, action, data = parse(workspace, raw)
    except InvalidEvent:
        return None
    event = _event(workspace, envelope, action, data)
    policy = policies.policy_for(workspace.pk, action.name)
    if _staleness(event, policy):
        return None
    ordering.mark(workspace, event, policy.ordering)
    return None if event.ordered == Ordering.LATEST_WINS else event


def answered(event: reservation.Event, done: reservation.Reserved) -> IntakeResult:
    """What an event reserved outside ``submit_event`` is answered, as ``submit_event`` would."""
    return _answer(event, done)


def submit_batch(
    *,
    workspace: Workspace,
    raw_events: list,
    source: str,
    submitted_by: str = "",
    person=None,
    max_event_bytes: int | None = None,
    token: dict | None = None,
) -> list[IntakeResult]:
    """Record a batch set-based, each event still answered on its own.

    Every event is validated first; then one transaction writes them all (``ledger.intake.reservation``):
    a refused event leaves only its invalid delivery, the others reserve their keys.
    ``max_event_bytes`` holds each event (as UTF-8 JSON) to the limit of a single one. If writing
    the set fails unexpectedly, nothing of it stays and the events are written one at a time, each
    in its own transaction: the one that fails again leaves nothing and is answered ``FAILED``
    (500), logged without its content; sending it again is safe. An unreachable database is not an
    event's failure: the error propagates and the request answers 503 (what committed stays; sent
    again, it comes back as duplicates). Nor is a changed ``token`` (as ``submit_event``): it propagates.
    """
    sender = {"source": source, "submitted_by": submitted_by, "person": person}
    try:
        return _submit(workspace, raw_events, sender=sender, max_event_bytes=max_event_bytes, token=token)
    except (OperationalError, InterfaceError, TokenChanged):
        raise
    except Exception:
        # A warning: each event is tried again alone, and one that fails again is logged as an error.
        logger.warning(
            "a batch could not be written at once; writing its events one at a time",
            exc_info=True,
            extra={"workspace": workspace.slug, "events": len(raw_events)},
        )
    return [
        _submit_alone(workspace, index, raw, max_event_bytes, sender, token) for index, raw in enumerate(raw_events)
    ]


def _submit_alone(
    workspace: Workspace, index: int, raw: Any, max_event_bytes: int | None, sender: dict, token: dict | None
) -> IntakeResult:
    try:
        [result] = _submit(workspace, [raw], sender=sender, max_event_bytes=max_event_bytes, token=token)
        return result
    except (OperationalError, InterfaceError, TokenChanged):
        raise
    except Exception:
        logger.exception(
            "batch event failed unexpectedly; nothing of it was recorded",
            extra={"workspace": workspace.slug, "batch_index": index},
        )
        return IntakeResult(
            outcome=FAILED,
            http_status=500,
            reason="internal_error",
            errors=[
                {
                    "field": "body",
                    "message": "the event could not be recorded (a server error); nothing of it was kept, "
                    "so it is safe to send again",
                }
            ],
        )


def _submit(
    workspace: Workspace, raws: list, *, sender: dict, max_event_bytes: int | None = None, token: dict | None = None
) -> list[IntakeResult]:
    """Validate every event, then write them all in one transaction: the refused ones as invalid
    deliveries, the others reserved set-based."""
    results: dict[int, IntakeResult] = {}  # by the event's place in ``raws``
    refused: list[Delivery] = []
    events: list[reservation.Event] = []
    positions: list[int] = []
    for index, raw in enumerate(raws):
        if max_event_bytes is not None and json_size(raw) > max_event_bytes:
            delivery, results[index] = _refusal(
                workspace,
                raw,
                sender,
                reason="too_large",
                http_status=413,
                extra={"limit_bytes": max_event_bytes},
                errors=[{"field": "body", "message": f"the event is larger than the limit of {max_event_bytes} bytes"}],
            )
            refused.append(delivery)
            continue
        try:
            envelope, action, data = parse(workspace, raw)
        except InvalidEvent as invalid:
            delivery, results[index] = _refusal(
                workspace, raw, sender, reason="invalid_input", http_status=422, errors=invalid.errors
            )
            refused.append(delivery)
            continue
        event = _event(workspace, envelope, action, data)
        policy = policies.policy_for(workspace.pk, action.name)
        if too_old := _staleness(event, policy):
            delivery, results[index] = _stale_refusal(workspace, event, sender, too_old)
            refused.append(delivery)
            continue
        ordering.mark(workspace, event, policy.ordering)
        events.append(event)
        positions.append(index)
    # Versions under latest_wins one at a time, each holding its request's series
    # (ledger.intake.ordering); everything else set-based, in one transaction.
    latest = [i for i, event in enumerate(events) if event.ordered == Ordering.LATEST_WINS]
    others = [i for i, event in enumerate(events) if event.ordered != Ordering.LATEST_WINS]
    # Each reservation is a transaction of its own, run again should the database abort it for a
    # deadlock (ledger.core.contention).
    reserved = dict(
        zip(
            others,
            contention.retried(
                reservation.reserve,
                workspace,
                [events[i] for i in others],
                refused=refused,
                doing="reserving events",
                token=token,
                **sender,
            ),
            strict=True,
        )
    )
    for i in latest:
        reserved[i] = ordering.reserve_latest(workspace, events[i], **sender)
    for i, (index, event) in enumerate(zip(positions, events, strict=True)):
        results[index] = _answer(event, reserved[i])
    return [results[index] for index in range(len(raws))]


def _answer(event: reservation.Event, done: reservation.Reserved) -> IntakeResult:
    if done.outcome == Outcome.STALE:  # an older version, after a newer one (latest_wins)
        return IntakeResult(
            outcome=Outcome.STALE,
            http_status=409,
            reason="stale",
            key=event.key,
            errors=[ordering.stale_error(event.version, done.operation.version)],
        )
    return IntakeResult(
        outcome=done.outcome,
        http_status=_STATUS[done.outcome],
        key=event.key,
        operation=done.operation,
        conflict=done.conflict,
        reason="payload_conflict" if done.conflict else "",
    )


_STATUS: dict[str, int] = {Outcome.ACCEPTED: 201, Outcome.DUPLICATE: 200, Outcome.CONFLICT: 409}


def _event(workspace, envelope: Envelope, action: ActionDefinition, data: dict) -> reservation.Event:
    return reservation.Event(
        action=action,
        data=data,
        key=key_for(workspace.slug, action, data),
        fingerprint=fingerprint(data, action.fingerprint_fields),
        sender_delivery_id=envelope.delivery_id or "",
        correlation_id=envelope.correlation_id or "",
        occurred_at=envelope.occurred_at,
    )


def key_for(workspace_slug: str, action: ActionDefinition, data: dict) -> str:
    """The operation key of ``data`` (normalised: ``action.normalised``) in the workspace."""
    return build_key(
        workspace_slug,
        action.name,
        [(f, data[f]) for f in action.identity_fields],
        sensitive=action.sensitive_fields,
        secret=settings.OPSCONSOLE_KEY_SECRET,
    )


def _staleness(event: reservation.Event, policy: policies.EffectivePolicy) -> str:
    """Why ``event`` is too old to take ("" when it is not): it says it occurred longer ago than the
    action's key window, so its operation's tombstone may be gone, and taking it could act twice."""
    if event.occurred_at is None:
        return ""
    window = policy.key_retention
    if event.occurred_at >= timezone.now() - window:
        return ""
    return (
        f"occurred more than {policies.format_duration(window)} ago, beyond the key window of "
        f"{event.action.name}: whether it was already handled can no longer be told, so it is not taken"
    )


def _stale_refusal(workspace, event: reservation.Event, sender: dict, why: str) -> tuple[Delivery, IntakeResult]:
    errors = [FieldError("occurred_at", why).as_dict()]
    delivery = reservation.stale_delivery(workspace, event, errors, **sender)
    return delivery, IntakeResult(outcome=Outcome.STALE, http_status=409, reason="stale", key=event.key, errors=errors)


def json_size(value) -> int:
    """``value``'s size as UTF-8 JSON, the size limits' measure."""
    # Lone surrogates are counted as their three bytes: intake refuses them by name later.
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def record_blocked_delivery(
    *,
    workspace: Workspace,
    source: str,
    reason: str,
    errors: list[dict],
    http_status: int,
    submitted_by: str = "",
    person=None,
    raw: Any = None,
    extra: dict | None = None,
) -> IntakeResult:
    """Record a delivery that cannot become an operation. Keeps its errors, never its content."""
    sender = {"source": source, "submitted_by": submitted_by, "person": person}
    delivery, result = _refusal(
        workspace, raw, sender, reason=reason, http_status=http_status, errors=errors, extra=extra
    )
    delivery.save()
    return result


def _refusal(
    workspace, raw, sender: dict, *, reason: str, http_status: int, errors: list[dict], extra: dict | None = None
) -> tuple[Delivery, IntakeResult]:
    """The invalid delivery (not saved yet) and the answer for an event that cannot become an operation."""
    raw = raw if isinstance(raw, dict) else {}
    delivery = Delivery(
        workspace=workspace,
        **sender,
        outcome=Outcome.INVALID,
        errors=errors,
        action=_label(raw.get("action"), 100),
        sender_delivery_id=_label(raw.get("delivery_id"), 200),
        correlation_id=_label(raw.get("correlation_id"), 200),
    )
    return delivery, IntakeResult(
        outcome=Outcome.INVALID, http_status=http_status, reason=reason, errors=errors, extra=extra or {}
    )


def _label(value, limit: int) -> str:
    """A transport label of a blocked delivery, as much of it as can be stored."""
    return storable(value[:limit]) if isinstance(value, str) else ""
