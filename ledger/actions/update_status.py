"""``update-status``: the latest status of a request wins. Internal (the destination is
``RequestStatus``, one row per request), and ordered ``latest_wins``: a newer version supersedes
older ones that have not run, and an older one arriving after a newer one is answered ``stale``."""

from datetime import timedelta
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict

from ledger.actions.base import ActionDefinition, register
from ledger.actions.fields import RequestId, Version
from ledger.outcomes import Success

Status = Literal["received", "in_review", "approved", "closed"]
STATUSES = get_args(Status)


class UpdateStatusData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: RequestId
    version: Version
    status: Status


@register
class UpdateStatus(ActionDefinition):
    name = "update-status"
    schema = UpdateStatusData
    identity_fields = ("request_id", "version")
    fingerprint_fields = ("request_id", "version", "status")
    summary = "{request_id} v{version} · status {status}"
    ordering = "latest_wins"
    service_level = timedelta(minutes=5)

    def perform(self, operation):
        [success] = self.perform_many([operation])
        return success

    def perform_many(self, operations):
        # Inside the transaction that records `succeeded`. Each row moves only forward in version:
        # should an older version run after a newer one (claimed before it arrived), it leaves the
        # newer status standing and says so in its result.
        from ledger.models import RequestStatus

        successes = []
        for operation in operations:
            payload = operation.payload
            row, created = RequestStatus.objects.get_or_create(
                workspace_id=operation.workspace_id,
                request_id=payload["request_id"],
                defaults={"status": payload["status"], "version": payload["version"], "operation": operation},
            )
            if not created and row.version < payload["version"]:
                RequestStatus.objects.filter(pk=row.pk, version__lt=payload["version"]).update(
                    status=payload["status"], version=payload["version"], operation=operation
                )
                row.status, row.version = payload["status"], payload["version"]
            result = {"status_id": f"status-{row.pk}", "status": row.status, "version": row.version}
            if row.version > payload["version"]:
                result["overtaken_by_version"] = row.version
            successes.append(Success(result=result, external_id=f"status-{row.pk}"))
        return successes
