"""``prepare-brief``: the teaching action. One internal review draft per request version."""

from datetime import timedelta

from pydantic import BaseModel, ConfigDict

from ledger.actions.base import ActionDefinition, register
from ledger.actions.fields import Owner, RequestId, Text, Version, approved_owner_errors
from ledger.outcomes import Success


class PrepareBriefData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: RequestId
    version: Version
    title: Text
    owner: Owner


@register
class PrepareBrief(ActionDefinition):
    name = "prepare-brief"
    schema = PrepareBriefData
    identity_fields = ("request_id", "version")
    fingerprint_fields = ("request_id", "version", "title", "owner")
    summary = "{request_id} v{version} · {title}"
    service_level = timedelta(minutes=5)

    def check(self, workspace, data):
        return approved_owner_errors(workspace, data["owner"])

    def perform(self, operation):
        [success] = self.perform_many([operation])
        return success

    def perform_many(self, operations):
        # Runs inside the transaction that records `succeeded`; the one-to-one from draft to
        # operation makes a second draft impossible even if two workers raced here. One INSERT
        # for all of them (it returns the new ids).
        from ledger.models import ReviewDraft

        drafts = ReviewDraft.objects.bulk_create(
            [
                ReviewDraft(
                    operation_id=operation.pk,
                    workspace_id=operation.workspace_id,
                    title=operation.payload["title"],
                    owner=operation.payload["owner"],
                )
                for operation in operations
            ]
        )
        return [
            Success(
                result={
                    "draft_id": f"draft-{draft.pk}",
                    "title": draft.title,
                    "owner": draft.owner,
                    "state": draft.state,
                },
                external_id=f"draft-{draft.pk}",
            )
            for draft in drafts
        ]
