"""What every ledger admin shares: read-only, limited to the person's workspaces, with big lists read
with their size in mind (``CappedPaginator``, filters on choices known without reading the table)."""

import json

from django.contrib import admin
from django.core.paginator import Paginator
from django.db import connection
from django.utils.functional import cached_property
from django.utils.html import format_html

from ledger import states
from ledger.actions import registry
from ledger.core import privacy, roles
from ledger.models import (
    AuditEvent,
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


def reveals(obj) -> bool:
    return getattr(obj, "reveal_sensitive", False)


def as_json(value):
    return format_html('<pre class="json">{}</pre>', json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def state_as_the_console_says(field: str):
    """A display of the state in ``field`` in the console's words ("Outcome unknown", not the
    choice's "Unknown"): the admin and the console name a state the same way (``ledger.states.LABELS``)."""

    @admin.display(description=field.replace("_", " "), ordering=field)
    def shown(obj) -> str:
        value = getattr(obj, field)
        return states.label(value) if value else "—"

    shown.__name__ = f"{field}_label"
    return shown


class StateListFilter(admin.SimpleListFilter):
    """The states in the console's words, in the console's order."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return list(states.LABELS.items())

    def queryset(self, request, queryset):
        return queryset.filter(state=self.value()) if self.value() else queryset
