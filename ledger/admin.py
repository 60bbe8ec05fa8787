"""The ledger in the Django admin: read-only, and for a person who is not a superuser limited to
their workspaces (``ledger.roles``). Changes go through the services, never the admin; the one
exception is who belongs to which workspace (Membership), which a superuser manages here.

The big lists (millions of operations, deliveries, attempts and audit events) are read with their
size in mind: each is ordered along an index (newest first: by id, which is creation order, or by
the audit trail's (created_at, id)), counted only up to ``CappedPaginator.cap``, filtered on choices
known without reading the table, searched by the start of the operation's key and any part of
its request id (the indexes of migration 0007), and loads the related rows it shows in one query.

Payloads, results and conflicts are shown as ``ledger.privacy`` masks them for the person (never
the raw JSON fields): sensitive values only to those who may see them in the row's workspace.
"""

import json

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.paginator import Paginator
from django.db import connection
from django.utils.functional import cached_property
from django.utils.html import format_html

from ledger import (
    people_admin,  # noqa: F401  registers the admin of people (users)
    policies,
    privacy,
    roles,
    services,
)
from ledger.actions import registry
from ledger.models import (
    ApiToken,
    Approval,
    Attempt,
    AuditEvent,
    BacklogSample,
    BulkAction,
    BulkItem,
    ConfigVersion,
    Conflict,
    Contribution,
    Control,
    Delivery,
    DestinationHealth,
    FlowSample,
    Heartbeat,
    Membership,
    Operation,
    Policy,
    RequestStatus,
    ReviewDraft,
    Tally,
    Wakeup,
    Workspace,
)


class CappedPaginator(Paginator):
    """Counts a changelist only up to ``cap`` rows: past that, the exact number of millions tells a
    person nothing, and counting them cost more than the page. The page links reach the first
    ``cap`` rows; the total reads "2000+" (templates/admin/ledger/); filters and search narrow.
    The bound also bounds the deepest offset, and keeps PostgreSQL on the plan that walks the
    newest rows (at 10,000 a member's list, narrowed through a join, switched to hashing it whole)."""

    cap = 2_000

    @cached_property
    def counted(self) -> int:
        return self.object_list[: self.cap + 1].count()

    @cached_property
    def count(self) -> int:
        return min(self.counted, self.cap)

    @property
    def capped(self) -> bool:
        return self.counted > self.cap


def distinct_values(model, column: str) -> list[str]:
    """The distinct values of ``column``, found by skipping through an index that leads with it
    (one index probe per value) instead of a SELECT DISTINCT over every row."""
    table, column = connection.ops.quote_name(model._meta.db_table), connection.ops.quote_name(column)
    with connection.cursor() as cursor:
        cursor.execute(f"""
            WITH RECURSIVE found(value) AS (
                SELECT (SELECT {column} FROM {table} ORDER BY {column} LIMIT 1)
                UNION ALL
                SELECT (SELECT {column} FROM {table} WHERE {column} > found.value ORDER BY {column} LIMIT 1)
                FROM found WHERE found.value IS NOT NULL
            )
            SELECT value FROM found WHERE value IS NOT NULL""")
        return [value for (value,) in cursor.fetchall()]


class WorkspaceListFilter(admin.RelatedFieldListFilter):
    """The person's own workspaces (the default lists every workspace, naming the others')."""

    def field_choices(self, field, request, model_admin):
        return [(workspace.pk, str(workspace)) for workspace in roles.workspaces(request.user)]


class ActionListFilter(admin.SimpleListFilter):
    """The action types in the registry (the default reads every row for its distinct values)."""

    title = "action"
    parameter_name = "action"

    def lookups(self, request, model_admin):
        return [(name, name) for name in sorted(registry)]

    def queryset(self, request, queryset):
        return queryset.filter(action=self.value()) if self.value() else queryset


class AuditKindListFilter(admin.SimpleListFilter):
    """The kinds of audit event recorded, read through the (kind, created_at, id) index."""

    title = "kind"
    parameter_name = "kind"

    def lookups(self, request, model_admin):
        return [(kind, kind) for kind in distinct_values(AuditEvent, "kind")]

    def queryset(self, request, queryset):
        return queryset.filter(kind=self.value()) if self.value() else queryset


User = get_user_model()
# The start of the key (a pasted key), or any part of the request id: the searches PostgreSQL has
# indexes for (migration 0007); the other columns once searched here were read row by row.
KEY_SEARCH = ["^operation__key", "operation__payload__request_id"]
KEY_SEARCH_HELP = "The start of the operation's key (demo:R-42…), or any part of its request id."


class ReadOnlyAdmin(admin.ModelAdmin):
    """Visible to staff with a role in some workspace, showing only the rows of those workspaces
    (``workspace_path``: where the row's workspace is; None for rows that belong to no workspace,
    which only a superuser sees)."""

    workspace_path: str | None = "workspace"
    paginator = CappedPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # a count per filter choice is a scan per choice

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


class SensitiveAdmin(ReadOnlyAdmin):
    """Shows its JSON through masked renderings: the object shown learns, once, whether the person
    may see its sensitive values (display methods are given the object, not the request)."""

    def get_object(self, request, object_id, from_field=None):
        obj = super().get_object(request, object_id, from_field)
        if obj is not None:
            obj.reveal_sensitive = privacy.may_view_sensitive(request.user, self.workspace_id_of(obj))
        return obj

    def workspace_id_of(self, obj) -> int:
        raise NotImplementedError


def _reveals(obj) -> bool:
    return getattr(obj, "reveal_sensitive", False)


def _json(value):
    return format_html('<pre class="json">{}</pre>', json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    fields = ["number", "outcome", "started_at", "finished_at", "error_type", "error_message", "worker"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Operation)
class OperationAdmin(SensitiveAdmin):
    list_display = ["key", "workspace", "action", "state", "attempts", "next_attempt_at", "updated_at"]
    list_filter = ["state", ActionListFilter, ("workspace", WorkspaceListFilter)]
    list_select_related = ["workspace"]
    ordering = ["-pk"]
    sortable_by = []
    search_fields = ["^key", "payload__request_id"]
    search_help_text = "The start of the key (demo:R-42…), or any part of the request id."
    inlines = [AttemptInline]
    exclude = ["payload", "result"]
    readonly_fields = ["payload_shown", "result_shown"]

    def workspace_id_of(self, obj) -> int:
        return obj.workspace_id

    @admin.display(description="payload")
    def payload_shown(self, operation):
        return _json(privacy.masked(operation.payload, operation.action, reveal=_reveals(operation)))

    @admin.display(description="result")
    def result_shown(self, operation):
        return _json(privacy.masked(operation.result, operation.action, reveal=_reveals(operation)))


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = ["received_at", "workspace", "source", "outcome", "action", "key", "delivery_id"]
    list_filter = ["outcome", "source", ("workspace", WorkspaceListFilter)]
    list_select_related = ["workspace"]
    ordering = ["-pk"]
    sortable_by = []
    search_fields = KEY_SEARCH
    search_help_text = KEY_SEARCH_HELP


@admin.register(Conflict)
class ConflictAdmin(SensitiveAdmin):
    workspace_path = "operation__workspace"
    list_display = ["created_at", "operation", "status"]
    list_filter = ["status"]
    list_select_related = ["operation"]
    ordering = ["-pk"]
    sortable_by = []
    search_fields = KEY_SEARCH
    search_help_text = KEY_SEARCH_HELP
    exclude = ["incoming_payload", "differences"]
    readonly_fields = ["incoming_payload_shown", "differences_shown"]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("operation")

    def workspace_id_of(self, obj) -> int:
        return obj.operation.workspace_id

    @admin.display(description="incoming payload")
    def incoming_payload_shown(self, conflict):
        return _json(privacy.masked(conflict.incoming_payload, conflict.operation.action, reveal=_reveals(conflict)))

    @admin.display(description="differences")
    def differences_shown(self, conflict):
        return _json(privacy.masked_differences(conflict.differences, conflict.operation.action,
                                                reveal=_reveals(conflict)))


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "actor", "kind", "operation", "from_state", "to_state", "error_category"]
    list_filter = [AuditKindListFilter]
    list_select_related = ["operation"]
    ordering = ["-created_at", "-id"]
    sortable_by = ["created_at"]
    search_fields = KEY_SEARCH
    search_help_text = KEY_SEARCH_HELP + " The console's audit page also filters by actor and dates."


@admin.register(ReviewDraft)
class ReviewDraftAdmin(ReadOnlyAdmin):
    list_display = ["pk", "title", "owner", "state", "operation", "created_at"]
    list_select_related = ["operation"]
    ordering = ["-pk"]
    sortable_by = []
    search_fields = KEY_SEARCH
    search_help_text = KEY_SEARCH_HELP


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    workspace_path = "operation__workspace"
    list_display = ["operation", "number", "outcome", "started_at", "finished_at", "error_type"]
    list_filter = ["outcome"]
    list_select_related = ["operation"]
    ordering = ["-pk"]
    sortable_by = []
    search_fields = KEY_SEARCH  # the idempotency key sent is the operation's key
    search_help_text = KEY_SEARCH_HELP


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    workspace_path = "operation__workspace"
    list_display = ["decided_at", "operation", "decision", "approver", "note"]
    list_filter = ["decision"]
    list_select_related = ["operation"]
    ordering = ["-pk"]
    sortable_by = []
    search_fields = KEY_SEARCH
    search_help_text = KEY_SEARCH_HELP


@admin.register(Contribution)
class ContributionAdmin(ReadOnlyAdmin):
    workspace_path = "operation__workspace"
    list_display = ["created_at", "operation", "user", "kind"]
    list_filter = ["kind"]
    list_select_related = ["operation", "user"]
    ordering = ["-pk"]
    sortable_by = []
    search_fields = KEY_SEARCH
    search_help_text = "A username (exactly), or " + KEY_SEARCH_HELP[0].lower() + KEY_SEARCH_HELP[1:]

    def get_search_results(self, request, queryset, search_term):
        # A person's contributions through the user index; a username OR'ed into the key search
        # would join and scan every contribution instead.
        person = User.objects.filter(username=search_term.strip()).first() if search_term.strip() else None
        if person is not None:
            return queryset.filter(user=person), False
        return super().get_search_results(request, queryset, search_term)


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
    list_filter = ["role", ("workspace", WorkspaceListFilter)]
    list_select_related = ["workspace", "user"]
    search_fields = ["user__username", "workspace__slug"]
    autocomplete_fields = ["user"]

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return self.has_module_permission(request)

    has_add_permission = has_change_permission = has_delete_permission = has_view_permission

    def get_readonly_fields(self, request, obj=None):
        return ["workspace", "user"] if obj is not None else []  # a change is a change of role

    # Through the services, as `manage.py member` does: audited, and removing revokes the person's
    # tokens of the workspace in the same transaction (the admin's views are atomic).
    def save_model(self, request, obj, form, change):
        obj.pk = services.set_membership(workspace=obj.workspace, user=obj.user, role=obj.role,
                                         actor=request.user.get_username()).pk

    def delete_model(self, request, obj):
        services.remove_membership(workspace=obj.workspace, user=obj.user, actor=request.user.get_username())

    def delete_queryset(self, request, queryset):
        for membership in queryset.select_related("workspace", "user"):
            self.delete_model(request, membership)


@admin.register(Control)
class ControlAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "reason", "changed_by", "changed_at"]
    list_select_related = ["workspace"]  # the scope names it


@admin.register(ConfigVersion)
class ConfigVersionAdmin(ReadOnlyAdmin):
    """The configurations attempts ran under (ledger.configuration): superusers only, since one
    belongs to no workspace."""

    workspace_path = None
    list_display = ["digest", "action", "created_at"]
    search_fields = ["=digest", "action"]


@admin.register(RequestStatus)
class RequestStatusAdmin(ReadOnlyAdmin):
    """The internal destination of update-status: each request's latest status."""

    list_display = ["request_id", "status", "version", "workspace", "updated_at"]
    list_select_related = ["workspace"]
    search_fields = ["request_id"]


@admin.register(Tally)
class TallyAdmin(ReadOnlyAdmin):
    """The counters the workers keep for /metrics (ledger.tallies), one row per process."""

    workspace_path = None
    list_display = ["name", "labels", "shard", "value"]
    search_fields = ["name"]


@admin.register(Heartbeat)
class HeartbeatAdmin(ReadOnlyAdmin):
    workspace_path = None
    list_display = ["name", "beat_at", "detail"]


@admin.register(Wakeup)
class WakeupAdmin(ReadOnlyAdmin):
    workspace_path = None
    list_display = ["name", "requested_at"]


@admin.register(DestinationHealth)
class DestinationHealthAdmin(ReadOnlyAdmin):
    workspace_path = None
    list_display = ["name", "last_ok_at", "last_failure_at"]


class PolicyForm(forms.ModelForm):
    """A policy as the service will have it: the action one of the registered ones, the windows
    checked against each other in every workspace the row reaches (``policies.check``)."""

    action = forms.ChoiceField(choices=lambda: [(name, name) for name in sorted(registry)])

    class Meta:
        model = Policy
        fields = ["workspace", "action", *policies.FIELDS]

    def clean(self):
        cleaned = super().clean()
        proposed = Policy(workspace=cleaned.get("workspace"), action=cleaned.get("action", ""),
                          **{name: cleaned.get(name) for name in policies.FIELDS})
        if proposed.action:
            try:
                policies.check(proposed)
            except policies.PolicyError as exc:
                raise forms.ValidationError(str(exc)) from None
        return cleaned

    def validate_unique(self):
        pass  # saved through policies.set_policy, which updates the row of the scope when there is one


@admin.register(Policy)
class PolicyAdmin(ReadOnlyAdmin):
    """Retention windows and ordering per action (docs/retention.md): superusers set them here or
    with ``manage.py policy``; both go through ``policies.set_policy``, which audits the change. A
    blank field inherits. Members see their workspaces' rows."""

    form = PolicyForm
    list_display = ["action", "workspace", *policies.FIELDS, "changed_by", "changed_at"]
    list_select_related = ["workspace"]

    def has_add_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_superuser

    has_change_permission = has_add_permission

    def get_readonly_fields(self, request, obj=None):
        return ["workspace", "action"] if obj is not None else []

    def save_model(self, request, obj, form, change):
        changes = {name: form.cleaned_data.get(name) or policies.INHERIT for name in policies.FIELDS}
        policies.set_policy(workspace=obj.workspace, action=obj.action, actor=request.user.get_username(), **changes)
        obj.pk = Policy.objects.get(workspace=obj.workspace, action=obj.action).pk


@admin.register(FlowSample)
class FlowSampleAdmin(ReadOnlyAdmin):
    """The dashboard's samples of what finished and failed (ledger.dashboard), newest first."""

    list_display = ["hour", "since", "until", "workspace", "action", "attempts", "failures", "succeeded", "rejected",
                    "cancelled", "superseded"]
    list_select_related = ["workspace"]
    list_filter = [("workspace", WorkspaceListFilter)]
    ordering = ["-hour", "-id"]


@admin.register(BacklogSample)
class BacklogSampleAdmin(ReadOnlyAdmin):
    """The dashboard's samples of the backlog (ledger.dashboard), newest first."""

    list_display = ["at", "workspace", "unfinished"]
    list_select_related = ["workspace"]
    list_filter = [("workspace", WorkspaceListFilter)]
    ordering = ["-at", "-id"]


@admin.register(BulkAction)
class BulkActionAdmin(ReadOnlyAdmin):
    """A person's replay or cancel of many operations (ledger.bulk_actions), newest first. One may
    reach several workspaces: superusers only (the console shows each to its submitter)."""

    workspace_path = None
    list_display = ["created_at", "kind", "user", "total", "done", "skipped", "failed", "status", "finished_at"]
    list_select_related = ["user"]
    list_filter = ["kind", "status"]
    ordering = ["-created_at", "-id"]
    show_full_result_count = False


@admin.register(BulkItem)
class BulkItemAdmin(ReadOnlyAdmin):
    """What a bulk action did to each of its operations (superusers only, as their actions)."""

    workspace_path = None
    list_select_related = ["bulk_action"]
    list_display = ["created_at", "bulk_action", "operation_id", "outcome", "detail"]
    list_filter = ["outcome"]
    ordering = ["-bulk_action", "-id"]
    show_full_result_count = False
