"""``prepare-brief``: the teaching action. One internal review draft per request version."""

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, StrictStr, StringConstraints

from ledger.actions.base import ActionDefinition, FieldError, register
from ledger.outcomes import Success


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


class PrepareBriefData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: Annotated[StrictStr, StringConstraints(max_length=200), AfterValidator(_not_blank)]
    version: Annotated[StrictInt, Field(ge=1, le=2_147_483_647)]
    title: Annotated[StrictStr, StringConstraints(strip_whitespace=True, min_length=1, max_length=500)]
    owner: Annotated[StrictStr, StringConstraints(min_length=1, max_length=100)]


@register
class PrepareBrief(ActionDefinition):
    name = "prepare-brief"
    schema = PrepareBriefData
    identity_fields = ("request_id", "version")
    fingerprint_fields = ("request_id", "version", "title", "owner")

    def check(self, workspace, data):
        if data["owner"] not in workspace.approved_owners:
            allowed = ", ".join(workspace.approved_owners) or "none configured"
            return [FieldError("data.owner", f"must be one of the workspace's approved owners ({allowed})")]
        return []

    def perform(self, operation):
        # Runs inside the transaction that records `succeeded`; the one-to-one from draft to
        # operation makes a second draft impossible even if two workers raced here.
        from ledger.models import ReviewDraft

        draft = ReviewDraft.objects.create(
            operation=operation,
            workspace_id=operation.workspace_id,
            title=operation.payload["title"],
            owner=operation.payload["owner"],
        )
        return Success(
            result={"draft_id": f"draft-{draft.pk}", "title": draft.title, "owner": draft.owner,
                    "state": draft.state},
            external_id=f"draft-{draft.pk}",
        )
