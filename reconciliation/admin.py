"""The audit's runs and mismatches in the Django admin: read-only like the ledger's (decisions
go through the console, ``reconciliation.mismatches``)."""

from django.contrib import admin

from ledger.admin.lists import ReadOnlyAdmin
from reconciliation.models import Mismatch, ReconciliationRun


@admin.register(ReconciliationRun)
class ReconciliationRunAdmin(ReadOnlyAdmin):
    workspace_path = None  # a run counts every workspace: superusers only
    list_display = (
        "id",
        "started_at",
        "since",
        "until",
        "status",
        "missing_at_destination",
        "unknown_to_ledger",
        "content_differs",
        "destination_reset",
        "new_mismatches",
        "duration",
    )
    list_filter = ("status",)
    ordering = ("-id",)


@admin.register(Mismatch)
class MismatchAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "created_at",
        "workspace",
        "destination",
        "action",
        "kind",
        "reference",
        "record_id",
        "status",
    )
    list_filter = ("kind", "status")
    list_select_related = ("workspace",)
    ordering = ("-id",)
