"""Payload field types and checks shared by the action schemas, so one rule lives in one place."""

from typing import Annotated

from pydantic import AfterValidator, Field, StrictInt, StrictStr, StringConstraints

from ledger.actions.base import FieldError


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


# Identity: kept exactly as sent (no trimming), since it becomes part of the key.
RequestId = Annotated[StrictStr, StringConstraints(max_length=200), AfterValidator(_not_blank)]
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
