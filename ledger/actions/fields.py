"""Payload field types and checks shared by the action schemas, so one rule lives in one place."""

from typing import Annotated

from pydantic import AfterValidator, Field, StrictInt, StrictStr, StringConstraints

from ledger import keys
from ledger.actions.base import FieldError


def _identifier(value: str) -> str:
    keys.identifier(value)  # its rules; the action's normaliser (the same function) stores its NFC form
    return value


def _email(value: str) -> str:
    keys.email_address(value)
    return value


# Identity: kept exactly as sent (no trimming; normaliser ``keys.identifier``), since it becomes
# part of the key; no control characters, not blank. The pattern publishes the rule it enforces.
RequestId = Annotated[
    StrictStr,
    StringConstraints(min_length=1, max_length=200),
    AfterValidator(_identifier),
    Field(json_schema_extra={"pattern": keys.IDENTIFIER_PATTERN}),
]
# An email address as an identity (normaliser ``keys.email_address``): trimmed, its domain
# lower-cased (IDNA), its local part kept.
Email = Annotated[
    StrictStr,
    StringConstraints(max_length=254),
    AfterValidator(_email),
    Field(json_schema_extra={"pattern": keys.EMAIL_PATTERN}),
]
# A whole number >= 1: `true`, `3.5` and `"3"` are refused (strict).
Version = Annotated[StrictInt, Field(ge=1, le=2_147_483_647)]
# Free text: trimmed, then required.
Text = Annotated[StrictStr, StringConstraints(strip_whitespace=True, min_length=1, max_length=500)]
Owner = Annotated[StrictStr, StringConstraints(min_length=1, max_length=100)]


def approved_owner_errors(workspace, owner: str) -> list[FieldError]:
    """The owner must be one of the workspace's approved owners."""
    if owner in workspace.approved_owners:
        return []
    allowed = ", ".join(workspace.approved_owners) or "none configured"
    return [FieldError("data.owner", f"must be one of the workspace's approved owners ({allowed})")]
