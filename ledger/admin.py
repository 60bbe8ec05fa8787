"""The ledger in the Django admin: read-only, and for a person who is not a superuser limited to
their workspaces (``ledger.roles``). Changes go through the services, never the admin; the one
exception is who belongs to which workspace (Membership), which a superuser manages here."""

from django.contrib import admin

from ledger import roles
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
    Membership,
    Operation,
    ReviewDraft,
    Workspace,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Visible to staff with a role in some workspace, showing only the rows of those workspaces
    (``workspace_path``: where the row's workspace is; None for rows that belong to no workspace,
    which only a superuser sees)."""

    workspace_path: str | None = "workspace"

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        if self.workspace_path is None:
            return queryset.none()
        return roles.visible(queryset, request.user, via=self.workspace_path)

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_staff and roles.workspace_ids(request.user) != set()

    def has_view_permission(self, request, obj=None):
        if not self.has_module_permission(request):
            return False
        return obj is None or self.get_queryset(request).filter(pk=obj.pk).exists()

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
    workspace_path = "operation__workspace"
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
    workspace_path = "operation__workspace"
    list_display = ["operation", "number", "outcome", "started_at", "finished_at", "error_type"]
    list_filter = ["outcome"]
    search_fields = ["operation__key", "operation__payload__request_id", "idempotency_key"]


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    workspace_path = "operation__workspace"
    list_display = ["decided_at", "operation", "decision", "approver", "note"]
    list_filter = ["decision"]
    search_fields = ["operation__key", "operation__payload__request_id", "approver"]


@admin.register(Contribution)
class ContributionAdmin(ReadOnlyAdmin):
    workspace_path = "operation__workspace"
    list_display = ["created_at", "operation", "user", "kind"]
    list_filter = ["kind"]
    list_select_related = ["operation", "user"]
    search_fields = ["operation__key", "user__username"]


@admin.register(Workspace)
class WorkspaceAdmin(ReadOnlyAdmin):
    workspace_path = "pk"
    list_display = ["slug", "approved_owners", "retry_budget_per_hour", "created_at"]
    search_fields = ["slug"]


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    list_display = ["workspace", "name", "hint", "user", "created_at", "revoked_at"]
    list_select_related = ["workspace", "user"]
    exclude = ["token_hash"]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    """Who belongs to which workspace, with which role: managed by superusers (or ``manage.py member``)."""

    list_display = ["workspace", "user", "role", "created_at"]
    list_filter = ["role", "workspace"]
    list_select_related = ["workspace", "user"]
    search_fields = ["user__username", "workspace__slug"]
    autocomplete_fields = ["user"]

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return self.has_module_permission(request)

    has_add_permission = has_change_permission = has_delete_permission = has_view_permission


@admin.register(Control)
class ControlAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "reason", "changed_by", "changed_at"]


@admin.register(Heartbeat)
class HeartbeatAdmin(ReadOnlyAdmin):
    workspace_path = None
    list_display = ["name", "beat_at", "detail"]
