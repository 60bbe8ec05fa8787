"""Operations and everything that hangs from one in the admin: deliveries, conflicts, attempts,
approvals, contributions, the audit trail, bulk actions and the internal destinations' rows."""

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db.models import Value
from django.utils.html import format_html, format_html_join

from ledger.admin.lists import (
    KEY_SEARCH,
    KEY_SEARCH_HELP,
    ActionListFilter,
    AuditKindListFilter,
    ReadOnlyAdmin,
    SensitiveAdmin,
    StateListFilter,
    WorkspaceListFilter,
    as_json,
    reveals,
    state_as_the_console_says,
)
from ledger.core import privacy
from ledger.intake.decoding import storable_text_problem
from ledger.models import (
    Approval,
    Attempt,
    AuditEvent,
    BulkAction,
    BulkItem,
    Conflict,
    Contribution,
    Delivery,
    HookRefusal,
    Operation,
    RequestStatus,
    ReviewDraft,
)
from ledger.people.may import what_may
from ledger.reads import work_lists

User = get_user_model()


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    fields = [
        "number",
        "outcome",
        "started_at",
        "finished_at",
        "error_type",
        "error_message",
        "http_status",
        "error_code",
        "answer_shown",
        "worker",
    ]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        # Display methods are given the row, not the request: each row learns what the person sees.
        return (
            super()
            .get_queryset(request)
            .annotate(reader_sees_every_answer=Value(privacy.sees_every_answer(request.user)))
        )

    @admin.display(description="what the destination said")
    def answer_shown(self, obj) -> str:
        # Stored masked (ledger.core.privacy.scrub_failure): shown as it is, escaped.
        if not (obj.response_body or obj.response_headers):
            return "—"
        shown = privacy.answer_shown(obj, configures_destinations=obj.reader_sees_every_answer)
        if shown is None:
            return "kept before masking after decoding: shown only to superusers"
        headers = "\n".join(f"{name}: {value}" for name, value in shown.headers.items())
        return format_html(
            "<details><summary>headers and body{}</summary><pre>{}</pre><pre>{}</pre></details>",
            "" if shown.in_full else " (long opaque strings blanked: superusers see them)",
            headers,
            shown.body,
        )


@admin.register(Operation)
class OperationAdmin(SensitiveAdmin):
    state_label = staticmethod(state_as_the_console_says("state"))
    list_display = ["key", "workspace", "action", "state_label", "attempts", "next_attempt_at", "updated_at"]
    list_filter = [StateListFilter, ActionListFilter, ("workspace", WorkspaceListFilter)]
    list_select_related = ["workspace"]
    ordering = ["-pk"]
    sortable_by = []
    search_fields = ["^key"]  # and the request id, as the console searches it (get_search_results)
    search_help_text = "The start of the key (demo:R-42…), or any part of the request id."
    inlines = [AttemptInline]
    exclude = ["payload", "result", "fingerprint"]
    readonly_fields = ["state_label", "payload_shown", "result_shown", "fingerprint_shown", "decisions_shown"]

    def get_fields(self, request, obj=None):
        # The state where the model has it, in the console's words.
        fields = [name for name in super().get_fields(request, obj) if name != "state_label"]
        return ["state_label" if name == "state" else name for name in fields]

    def get_search_results(self, request, queryset, search_term):
        # The console's search (``work_lists.key_or_request_id``): a sensitive request id is not
        # searched by its parts, which would give it away a letter at a time.
        term = search_term.strip()
        if not term or storable_text_problem(term):
            return super().get_search_results(request, queryset, search_term)
        return queryset.filter(work_lists.key_or_request_id(term)), False

    def get_object(self, request, object_id, from_field=None):
        operation = super().get_object(request, object_id, from_field)
        if operation is not None:
            # Whose decisions the change form lists (decisions_shown has no request of its own); they
            # are worked out there, so the delete and history pages do not pay for them.
            operation.viewer = request.user
        return operation

    def workspace_id_of(self, obj) -> int:
        return obj.workspace_id

    @admin.display(description="decisions (taken in the console)")
    def decisions_shown(self, operation):
        viewer = getattr(operation, "viewer", None)
        if viewer is None:
            return "—"
        may = what_may(viewer, operation)
        decisions = [
            ("Replay", may.replay),
            ("Cancel", may.cancel),
            ("Mark succeeded", may.mark_succeeded),
            ("Look up now", may.look_up),
            ("Approve or reject", may.decide),
        ]
        said = ((name, "yes" if verdict else f"no: {verdict.refusal}") for name, verdict in decisions)
        return format_html("<ul>{}</ul>", format_html_join("", "<li>{}: {}</li>", said))

    @admin.display(description="payload")
    def payload_shown(self, operation):
        return as_json(privacy.masked(operation.payload, operation.action, reveal=reveals(operation)))

    @admin.display(description="result")
    def result_shown(self, operation):
        return as_json(privacy.masked(operation.result, operation.action, reveal=reveals(operation)))

    @admin.display(description="fingerprint")
    def fingerprint_shown(self, operation):
        return privacy.fingerprint_shown(operation.fingerprint, operation.action, reveal=reveals(operation))


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = ["received_at", "workspace", "source", "outcome", "action", "key", "sender_delivery_id"]
    list_filter = ["outcome", "source", ("workspace", WorkspaceListFilter)]
    list_select_related = ["workspace"]
    ordering = ["-pk"]
    sortable_by = []
    search_fields = KEY_SEARCH
    search_help_text = KEY_SEARCH_HELP


@admin.register(HookRefusal)
class HookRefusalAdmin(ReadOnlyAdmin):
    """Arrivals at a source's hook not shown to be its sender's, counted (``ledger.intake.refusals``)."""

    workspace_path = "source__workspace"
    list_display = ["hour", "source", "address", "reason", "count", "last_seen"]
    list_filter = ["reason"]
    list_select_related = ["source"]
    ordering = ["-hour"]
    sortable_by = []
    search_fields = ["=address"]


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
    exclude = ["incoming_payload", "differences", "incoming_fingerprint"]
    readonly_fields = ["incoming_payload_shown", "differences_shown", "incoming_fingerprint_shown"]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("operation")

    def workspace_id_of(self, obj) -> int:
        return obj.operation.workspace_id

    @admin.display(description="incoming payload")
    def incoming_payload_shown(self, conflict):
        return as_json(privacy.masked(conflict.incoming_payload, conflict.operation.action, reveal=reveals(conflict)))

    @admin.display(description="incoming fingerprint")
    def incoming_fingerprint_shown(self, conflict):
        action = conflict.operation.action
        return privacy.fingerprint_shown(conflict.incoming_fingerprint, action, reveal=reveals(conflict))

    @admin.display(description="differences")
    def differences_shown(self, conflict):
        return as_json(
            privacy.masked_differences(conflict.differences, conflict.operation.action, reveal=reveals(conflict))
        )


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    from_state_label = staticmethod(state_as_the_console_says("from_state"))
    to_state_label = staticmethod(state_as_the_console_says("to_state"))
    list_display = ["created_at", "actor", "kind", "operation", "from_state_label", "to_state_label", "error_category"]
    list_filter = [AuditKindListFilter]
    list_select_related = ["operation"]
    ordering = ["-created_at", "-id"]
    sortable_by = ["created_at"]
    search_fields = KEY_SEARCH
    search_help_text = KEY_SEARCH_HELP + " The console's audit page also filters by actor and dates."
    exclude = ["message"]
    readonly_fields = ["message_shown"]

    def get_object(self, request, object_id, from_field=None):
        event = super().get_object(request, object_id, from_field)
        if event is not None:
            event.viewer = request.user  # message_shown has no request of its own
        return event

    @admin.display(description="message")
    def message_shown(self, event):
        # A decision names the payload's fingerprint, which gives away what the person sees masked.
        return privacy.audit_message_shown(event, getattr(event, "viewer", None))


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
class ApprovalAdmin(SensitiveAdmin):
    workspace_path = "operation__workspace"
    list_display = ["decided_at", "operation", "decision", "approver", "note"]
    list_filter = ["decision"]
    list_select_related = ["operation"]
    ordering = ["-pk"]
    sortable_by = []
    search_fields = KEY_SEARCH
    search_help_text = KEY_SEARCH_HELP
    exclude = ["fingerprint"]
    readonly_fields = ["fingerprint_shown"]

    def workspace_id_of(self, obj) -> int:
        return obj.operation.workspace_id

    @admin.display(description="fingerprint")
    def fingerprint_shown(self, approval):
        return privacy.fingerprint_shown(approval.fingerprint, approval.operation.action, reveal=reveals(approval))


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


@admin.register(RequestStatus)
class RequestStatusAdmin(ReadOnlyAdmin):
    """The internal destination of update-status: each request's latest status."""

    list_display = ["request_id", "status", "version", "workspace", "updated_at"]
    list_select_related = ["workspace"]
    search_fields = ["request_id"]


@admin.register(BulkAction)
class BulkActionAdmin(ReadOnlyAdmin):
    """A person's replay or cancel of many operations (ledger.people.bulk_actions), newest first. One may
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
