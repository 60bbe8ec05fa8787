"""What an arriving event must be: the envelope (the action, the sender's transport labels, when it
happened, the business data), its action known and its payload valid and normalised. ``parse``
reads one decoded event into them, or refuses it naming every field refused (``ledger.intake.submit``
records what it finds).

Text or times the database cannot store (NUL, unpaired surrogates, offsets beyond ±15:59,
implausible dates) are refused by name here, so that nothing unstorable reaches a transaction.
"""

import re
from datetime import UTC, timedelta
from typing import Annotated, Any

from django.utils import timezone
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
    field_validator,
)

from ledger.actions import ActionDefinition, FieldError, UnknownAction, get_action, registry
from ledger.actions.base import field_errors
from ledger.core import privacy
from ledger.intake.decoding import unstorable_errors

# A sender's clock may be off, but not by a decade; beyond that a time is refused, since a date
# near year 1 or 9999 cannot even be shown in another time zone.
OCCURRED_AT_WINDOW = timedelta(days=3653)
# PostgreSQL's timestamptz takes UTC offsets up to 15:59 either way (real ones span -12:00 to +14:00).
MAX_UTC_OFFSET = timedelta(hours=15, minutes=59)

Label = Annotated[StrictStr, StringConstraints(min_length=1, max_length=200)]
# RFC 3339's date-time (section 5.6), the form JSON Schema's `date-time` names: seconds and an
# offset required, `T` and `Z` in either case. Digits alone are no time (not read as Unix time).
RFC3339 = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
_RFC3339 = re.compile(RFC3339)


class Envelope(BaseModel):
    """What an automation sends: the action, optional transport metadata, and the business data."""

    model_config = ConfigDict(extra="forbid")

    action: Annotated[StrictStr, StringConstraints(min_length=1, max_length=100)]
    delivery_id: Label | None = None
    correlation_id: Label | None = None
    occurred_at: (
        Annotated[AwareDatetime, WithJsonSchema({"type": "string", "format": "date-time", "pattern": RFC3339})] | None
    ) = Field(
        None,
        description=(
            "When the event happened: an RFC 3339 date-time (`2025-12-03T08:00:00Z`) with a UTC offset "
            "within ±15:59, within 10 years of now."
        ),
    )
    data: dict[str, Any]

    @field_validator("occurred_at", mode="before")
    @classmethod
    def _a_string(cls, value):
        # Pydantic would also read a number, or a string of digits, as a Unix time, and take other
        # ISO 8601 forms; the envelope's documented form is RFC 3339 text.
        if value is None:
            return None
        if not isinstance(value, str) or not _RFC3339.fullmatch(value):
            raise ValueError("must be an RFC 3339 date-time string with a UTC offset (2025-12-03T08:00:00Z)")
        return value

    @field_validator("occurred_at")
    @classmethod
    def _plausible(cls, value):
        if value is None:
            return None
        if abs(value.utcoffset()) > MAX_UTC_OFFSET:
            raise ValueError("must have a UTC offset between -15:59 and +15:59")
        # An aware difference is computed without converting either side, so it cannot overflow.
        if abs(value - timezone.now()) > OCCURRED_AT_WINDOW:
            raise ValueError("must be within 10 years of now")
        return value.astimezone(UTC)


class InvalidEvent(Exception):
    """An event refused: ``errors`` names every field refused (``{"field", "message"}``), never its value."""

    def __init__(self, errors: list[FieldError]):
        super().__init__(f"{len(errors)} invalid fields")
        self.errors = [error.as_dict() for error in errors]


def parse(workspace, raw) -> tuple[Envelope, ActionDefinition, dict]:
    """The envelope, action and normalised data of ``raw`` (one decoded event), or InvalidEvent."""
    if not isinstance(raw, dict):
        raise InvalidEvent([FieldError("body", "must be a JSON object")])
    if unstorable := unstorable_errors(raw):
        raise InvalidEvent(unstorable)
    errors: list[FieldError] = []
    envelope: Envelope | None = None
    action: ActionDefinition | None = None
    data: dict | None = None
    try:
        envelope = Envelope.model_validate(raw)
    except ValidationError as exc:
        errors += field_errors(exc)

    action_name = raw.get("action")
    if isinstance(action_name, str) and action_name:
        try:
            action = get_action(action_name)
            if not action.submittable:
                raise UnknownAction(action_name)
        except UnknownAction:
            action = None
            known = ", ".join(sorted(name for name, found in registry.items() if found.submittable))
            errors.append(FieldError("action", f"is not a known action; known: {known}"))
    if action and isinstance(raw.get("data"), dict):
        data, invalid = action.validated(raw["data"])
        errors += invalid
        if data is not None:
            # What is stored, fingerprinted and keyed from here on is the normalised value.
            data, unnormal = action.normalised(data)
            errors += unnormal or action.check(workspace, data)
    # Each part missing has its error (an envelope, action or payload refused says why).
    if errors or envelope is None or action is None or data is None:
        if action is not None and isinstance(raw.get("data"), dict):
            # Kept on the delivery, shown to the whole workspace: never a sensitive value quoted.
            messages = privacy.refusals_masked([error.message for error in errors], action.name, raw["data"])
            errors = [FieldError(error.field, message) for error, message in zip(errors, messages, strict=True)]
        raise InvalidEvent(errors)
    return envelope, action, data
