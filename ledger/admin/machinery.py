"""The ledger's machinery in the admin: pause switches and the intervals they held, policies,
configuration versions, tallies, heartbeats, wake-ups, destination health and slots, the
dashboard's samples and the audit trail's installation record. Integrations (sources,
destinations, HTTP actions): ``ledger.admin.integrations``."""

from django import forms
from django.contrib import admin

from ledger.actions import registry
from ledger.admin.lists import ReadOnlyAdmin, WorkspaceListFilter
from ledger.core import policies
from ledger.models import (
    AuditArchive,
    AuditInstallation,
    BacklogSample,
    ConfigVersion,
    Control,
    DestinationHealth,
    DestinationSlot,
    FlowSample,
    Heartbeat,
    PauseInterval,
    Policy,
    Tally,
    Wakeup,
)


@admin.register(Control)
class ControlAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "reason", "changed_by", "changed_at"]
    list_select_related = ["workspace"]  # the scope names it


@admin.register(AuditInstallation)
class AuditInstallationAdmin(ReadOnlyAdmin):
    """The installation's id and the moment its audit trail became keyed (ledger.core.audit_verify):
    superusers only, since it belongs to no workspace."""

    workspace_path = None
    list_display = ["installation", "keyed_since"]


@admin.register(AuditArchive)
class AuditArchiveAdmin(ReadOnlyAdmin):
    """The months of the audit trail archived to files (``manage.py archive_audit``): superusers
    only, since a month holds every workspace's events."""

    workspace_path = None
    list_display = ["partition", "starts", "ends", "events", "file_name", "archived_at"]


@admin.register(PauseInterval)
class PauseIntervalAdmin(ReadOnlyAdmin):
    """The time each released switch held its scope, given to held operations at their claims."""

    list_display = ["workspace", "action", "started_at", "ended_at"]
    list_select_related = ["workspace"]


@admin.register(ConfigVersion)
class ConfigVersionAdmin(ReadOnlyAdmin):
    """The configurations attempts ran under (ledger.core.configuration): superusers only, since one
    belongs to no workspace."""

    workspace_path = None
    list_display = ["digest", "action", "created_at"]
    search_fields = ["=digest", "action"]


@admin.register(Tally)
class TallyAdmin(ReadOnlyAdmin):
    """The counters the workers keep for /metrics (ledger.core.tallies), one row per process."""

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


@admin.register(DestinationSlot)
class DestinationSlotAdmin(ReadOnlyAdmin):
    workspace_path = None
    list_display = ["name", "slot", "holder", "held_until"]


class PolicyForm(forms.ModelForm):
    """A policy as the service will have it: the action one of the registered ones, the windows
    checked against each other in every workspace the row reaches (``policies.check``)."""

    action = forms.ChoiceField(choices=lambda: [(name, name) for name in sorted(registry)])

    class Meta:
        model = Policy
        fields = ["workspace", "action", *policies.FIELDS]

    def clean(self):
        cleaned = super().clean()
        proposed = Policy(
            workspace=cleaned.get("workspace"),
            action=cleaned.get("action", ""),
            **{name: cleaned.get(name) for name in policies.FIELDS},
        )
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
    """The dashboard's samples of what finished and failed (ledger.reads.dashboard), newest first."""

    list_display = [
        "hour",
        "since",
        "until",
        "workspace",
        "action",
        "attempts",
        "failures",
        "succeeded",
        "rejected",
        "cancelled",
        "superseded",
    ]
    list_select_related = ["workspace"]
    list_filter = [("workspace", WorkspaceListFilter)]
    ordering = ["-hour", "-id"]


@admin.register(BacklogSample)
class BacklogSampleAdmin(ReadOnlyAdmin):
    """The dashboard's samples of the backlog (ledger.reads.dashboard), newest first."""

    list_display = ["at", "workspace", "unfinished"]
    list_select_related = ["workspace"]
    list_filter = [("workspace", WorkspaceListFilter)]
    ordering = ["-at", "-id"]
