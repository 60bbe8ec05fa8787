"""The ledger in the Django admin: read-only. Changes go through the services, never the admin."""

from django.contrib import admin

from ledger.models import (
    ApiToken,
    Approval,
    Attempt,
    AuditEvent,
    Conflict,
    Contribution,
    Control,
    Delivery,
    Heartbeat,
    Operation,
    ReviewDraft,
    Workspace,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    fields = ["number", "outcome", "started_at", "finished_at", "error_type", "error_message", "worker"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Operation)
class OperationAdmin(ReadOnlyAdmin):
    list_display = ["key", "workspace", "action", "state", "attempts", "next_attempt_at", "updated_at"]
    list_filter = ["state", "action", "workspace"]
    search_fields = ["key", "payload__request_id", "correlation_id", "external_id"]
    inlines = [AttemptInline]


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = ["received_at", "workspace", "source", "outcome", "action", "key", "delivery_id"]
    list_filter = ["outcome", "source", "workspace"]
    search_fields = ["key", "delivery_id", "correlation_id", "operation__payload__request_id"]


@admin.register(Conflict)
class ConflictAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "operation", "status"]
    list_filter = ["status"]
    search_fields = ["operation__key", "operation__payload__request_id"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "actor", "kind", "operation", "from_state", "to_state", "error_category"]
    list_filter = ["kind", "error_category"]
    search_fields = ["operation__key", "operation__payload__request_id", "actor", "message"]


@admin.register(ReviewDraft)
class ReviewDraftAdmin(ReadOnlyAdmin):
    list_display = ["pk", "title", "owner", "state", "operation", "created_at"]
    search_fields = ["operation__key", "operation__payload__request_id", "title"]


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ["operation", "number", "outcome", "started_at", "finished_at", "error_type"]
    list_filter = ["outcome"]
    search_fields = ["operation__key", "operation__payload__request_id", "idempotency_key"]


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    list_display = ["decided_at", "operation", "decision", "approver", "note"]
    list_filter = ["decision"]
    search_fields = ["operation__key", "operation__payload__request_id", "approver"]


@admin.register(Contribution)
class ContributionAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "operation", "user", "kind"]
    list_filter = ["kind"]
    list_select_related = ["operation", "user"]
    search_fields = ["operation__key", "user__username"]


@admin.register(Workspace)
class WorkspaceAdmin(ReadOnlyAdmin):
    list_display = ["slug", "approved_owners", "retry_budget_per_hour", "created_at"]
    search_fields = ["slug"]


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    list_display = ["workspace", "name", "hint", "user", "created_at", "revoked_at"]
    list_select_related = ["workspace", "user"]
    exclude = ["token_hash"]


@admin.register(Control)
class ControlAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "reason", "changed_by", "changed_at"]


@admin.register(Heartbeat)
class HeartbeatAdmin(ReadOnlyAdmin):
    list_display = ["name", "beat_at", "detail"]
