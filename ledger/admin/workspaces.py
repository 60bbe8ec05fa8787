"""Workspaces, their tokens and who belongs to them in the admin. Membership, a token's scopes and a
workspace's audit lanes are what a superuser changes here, each through ``ledger.core.accounts``."""

from django import forms
from django.contrib import admin

from ledger.admin.lists import ReadOnlyAdmin, WorkspaceListFilter
from ledger.core import accounts
from ledger.models import (
    ApiToken,
    Membership,
    Scope,
    Workspace,
)
from ledger.models.core import MAX_AUDIT_LANES


class WorkspaceForm(forms.ModelForm):
    class Meta:
        model = Workspace
        fields = ["audit_lanes"]

    def clean_audit_lanes(self):
        lanes = self.cleaned_data["audit_lanes"]
        if not 1 <= lanes <= MAX_AUDIT_LANES:
            raise forms.ValidationError(f"A workspace has 1 to {MAX_AUDIT_LANES} audit lanes.")
        return lanes


@admin.register(Workspace)
class WorkspaceAdmin(ReadOnlyAdmin):
    """Read-only, but for its audit lanes, which a superuser sets (audited, as ``manage.py
    audit_lanes`` does)."""

    workspace_path = "pk"
    form = WorkspaceForm
    list_display = ["slug", "approved_owners", "retry_budget_per_hour", "audit_lanes", "created_at"]
    fields = ["slug", "approved_owners", "retry_budget_per_hour", "audit_lanes", "created_at"]
    readonly_fields = ["slug", "approved_owners", "retry_budget_per_hour", "created_at"]
    search_fields = ["slug"]

    def has_change_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_superuser

    def save_model(self, request, obj, form, change):
        accounts.set_audit_lanes(obj, lanes=form.cleaned_data["audit_lanes"], actor=request.user.get_username())


class ApiTokenForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices,
        # radiolist: the admin's class for a list of choices, each label as wide as its text (not 160 px)
        widget=forms.CheckboxSelectMultiple(attrs={"class": "radiolist"}),
        required=False,  # none ticked: refused by checked_scopes, in its words
        help_text="What the token may be used for (docs/api-for-flows.md). Approve: a person's token only.",
    )

    class Meta:
        model = ApiToken
        fields = ["scopes"]

    def clean_scopes(self):
        try:
            return accounts.checked_scopes(self.cleaned_data["scopes"], person=self.instance.user_id is not None)
        except accounts.BadScopes as exc:
            raise forms.ValidationError(str(exc)) from None


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Read-only, but for a live token's scopes, which a superuser sets (audited, as ``manage.py
    token scopes`` does)."""

    form = ApiTokenForm
    list_display = ["workspace", "name", "hint", "owner", "scopes", "created_at", "revoked_at"]
    list_select_related = ["workspace", "user"]
    fields = ["workspace", "name", "hint", "owner", "scopes", "created_at", "revoked_at"]
    readonly_fields = ["workspace", "name", "hint", "owner", "created_at", "revoked_at"]

    @admin.display(description="Belongs to", ordering="user__username")
    def owner(self, obj):
        return obj.user.get_username() if obj.user else "a machine (no person behind it: it may never approve)"

    def has_change_permission(self, request, obj=None):
        superuser = request.user.is_active and request.user.is_superuser
        return superuser and (obj is None or obj.revoked_at is None)

    def save_model(self, request, obj, form, change):
        accounts.set_token_scopes(obj, scopes=form.cleaned_data["scopes"], actor=request.user.get_username())


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
        obj.pk = accounts.set_membership(
            workspace=obj.workspace, user=obj.user, role=obj.role, actor=request.user.get_username()
        ).pk

    def delete_model(self, request, obj):
        accounts.remove_membership(workspace=obj.workspace, user=obj.user, actor=request.user.get_username())

    def delete_queryset(self, request, queryset):
        for membership in queryset.select_related("workspace", "user"):
            self.delete_model(request, membership)
