"""Integrations in the admin: sources of signed webhooks, destinations, HTTP actions and
subscriptions to notifications, edited through the same services as ``manage.py integrations
apply`` (``ledger.integrations.sources``, ``ledger.integrations.saving``,
``ledger.integrations.subscriptions``). A form is refused on save with every problem, each saying where (a
template or an expression that does not compile names its place). Secrets stay in the environment:
the admin shows only whether the variable a row names is set, and for a source only a variable of
its workspace (``ledger.actions.secret_names``).

Sources and subscriptions belong to a workspace: its admins (the ``configure`` capability) edit them, as superusers
do. Destinations and HTTP actions serve every workspace: superusers edit them; staff with a role
see them, to know what an action calls.
"""

import json

from django import forms
from django.contrib import admin
from django.db import models
from django.utils.html import format_html

from ledger.actions import secret_names
from ledger.admin.lists import ReadOnlyAdmin
from ledger.core import roles
from ledger.core.selectors import AT_RISK_SHARE
from ledger.intake import decoding
from ledger.integrations import file as integrations_file
from ledger.integrations import saving, sources, subscriptions
from ledger.models import Destination, HttpAction, Source, Subscription
from ledger.models.subscriptions import EVENTS


class StrictJSONField(forms.JSONField):
    """JSON read as the integrations file is: a key twice in one object is refused, naming its path
    (``json.loads`` would keep the last one, unseen by whoever reads the form)."""

    def to_python(self, value):
        converted = super().to_python(value)
        if isinstance(value, str) and converted is not None and not self.disabled:
            try:
                decoding.decode_json(value)
            except decoding.DuplicateKey as exc:
                raise forms.ValidationError(
                    [f"{path}: appears more than once in its object" for path in exc.paths]
                ) from None
            except decoding.MalformedJSON as exc:
                raise forms.ValidationError(str(exc)) from None
        return converted


class SourceForm(forms.ModelForm):
    """A source as ``sources.save_source`` will have it: rules that compile and name registered
    actions, secrets named by its workspace's environment variables (refused on save, saying where,
    in the same words whether or not a refused variable is set)."""

    class Meta:
        model = Source
        fields = ["workspace", "slug", "scheme", "secret_env", "previous_secret_env", "tolerance_seconds", "rules"]
        field_classes = {"rules": StrictJSONField}

    def clean(self):
        cleaned = super().clean()
        proposed = Source(**{name: cleaned.get(name) for name in SourceForm.Meta.fields})
        if problems := sources.source_problems(proposed):
            raise forms.ValidationError(problems)
        return cleaned


class WorkspaceEdits(ReadOnlyAdmin):
    """Rows of one workspace whose secret stays in the environment (``secrets`` says whether it is
    set): edited by superusers and the workspace's admins, visible to its members."""

    list_select_related = ["workspace"]
    readonly_fields = ["secrets"]

    def has_add_permission(self, request, obj=None):
        return request.user.is_active and roles.workspace_ids(request.user, roles.CONFIGURE) != set()

    def has_change_permission(self, request, obj=None):
        if obj is None:
            return self.has_add_permission(request)
        return roles.can(request.user, roles.CONFIGURE, obj.workspace_id)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "workspace":  # a workspace admin adds rows to their workspaces only
            kwargs["queryset"] = roles.workspaces(request.user, roles.CONFIGURE)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


@admin.register(Source)
class SourceAdmin(WorkspaceEdits):
    """Senders of signed webhooks (``/api/v1/hooks/<slug>``): superusers and the workspace's admins
    configure them here; the secrets stay in the environment, shown only as set or missing. Members
    see their workspaces'."""

    form = SourceForm
    list_display = ["slug", "workspace", "scheme", "secrets", "updated_at"]

    @admin.display(description="Secrets")
    def secrets(self, obj):
        return sources.secret_status(obj) if obj.pk else "—"

    def save_model(self, request, obj, form, change):
        sources.save_source(obj, actor=request.user.get_username())  # what the form checked, audited


class SubscriptionForm(forms.ModelForm):
    """A subscription as ``subscriptions.save_subscription`` will have it: each problem said beside
    its field, in the service's words (refused on save)."""

    url = forms.URLField(
        label="URL",
        max_length=500,
        assume_scheme="https",
        help_text="Where each notification is POSTed (http or https), signed as a Standard Webhook: the receiver "
        "checks the webhook-signature header with the same whsec_ secret.",
    )
    events = forms.MultipleChoiceField(
        choices=[(event, f"{event}: {meaning}") for event, meaning in EVENTS.items()],
        # radiolist: the admin's class for a list of choices, each label as wide as its text (not 160 px)
        widget=forms.CheckboxSelectMultiple(attrs={"class": "radiolist"}),
        error_messages={"required": "Tick at least one event."},
        help_text="Tick at least one. Sensitive fields are never in a notification.",
    )

    class Meta:
        model = Subscription
        fields = ["workspace", "name", "url", "events", "secret_env", "active"]
        labels = {"secret_env": "Secret variable"}
        help_texts = {
            "name": "Letters, digits, - and _. An integrations file's subscription of this name updates this one.",
            "secret_env": "The name of the environment variable holding the whsec_ secret (never the secret "
            "itself), set for the web server and the workers alike. It starts with the workspace's prefix: "
            f"{secret_names.PREFIX}ACME_… for workspace acme.",
        }

    def clean(self):
        cleaned = super().clean()
        values = {name: cleaned.get(name) for name in SubscriptionForm.Meta.fields}
        proposed = Subscription(**values | {"events": list(values["events"] or [])})
        for problem in subscriptions.subscription_problems(proposed):
            field, _, said = problem.partition(": ")
            if field not in self.fields:
                self.add_error(None, problem)
            elif field not in self.errors:  # a field's own check (an invalid URL, no event) has said it already
                self.add_error(field, said)
        return cleaned


@admin.register(Subscription)
class SubscriptionAdmin(WorkspaceEdits):
    """Receivers of a workspace's notifications (signed Standard Webhooks): superusers and the
    workspace's admins configure them; the secret stays in the environment, shown only as set or
    missing. Members see their workspaces'."""

    form = SubscriptionForm
    list_display = ["name", "workspace", "url", "active", "secrets", "updated_at"]

    @admin.display(description="Secret")
    def secrets(self, obj):
        return subscriptions.secret_status(obj) if obj.pk else "shown once saved: whether its variable is set here"

    def save_model(self, request, obj, form, change):
        subscriptions.save_subscription(obj, actor=request.user.get_username())  # what the form checked, audited


class SuperuserEdits(ReadOnlyAdmin):
    """Rows that serve every workspace: visible to staff with a role, edited by superusers."""

    workspace_path = None

    def get_queryset(self, request):
        queryset = super(ReadOnlyAdmin, self).get_queryset(request)
        return queryset if roles.workspace_ids(request.user) != set() else queryset.none()

    def has_add_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_superuser

    has_change_permission = has_add_permission


class IndentedJSONField(StrictJSONField):
    """JSON shown indented, one key a line: a schema or a request template is read and edited
    there, not on one long line."""

    widget = forms.Textarea(attrs={"class": "vLargeTextField", "rows": 14, "cols": 100})

    def prepare_value(self, value):
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        return json.dumps(value, indent=2, ensure_ascii=False, cls=self.encoder)


class DestinationForm(forms.ModelForm):
    base_url = forms.URLField(max_length=500, assume_scheme="https")

    class Meta:
        model = Destination
        fields = ["slug", *integrations_file.DESTINATION_FIELDS]
        # What the limits mean (docs/integrations.md, Limits); the model's columns say only their names.
        help_texts = {
            "rate_limit_per_second": "Calls per second to the vendor, over all workers; empty: no limit.",
            "max_concurrency": "Calls in flight to the vendor at once, over all workers.",
            "breaker_cooldown_seconds": "How long calls pause once the breaker opens; then one probe call decides.",
        }

    def clean(self):
        cleaned = super().clean()
        if self.errors:  # a field that did not parse already says so
            return cleaned
        proposed = Destination(**{name: value for name, value in cleaned.items()})
        if problems := saving.destination_problems(proposed):
            raise forms.ValidationError(problems)
        return cleaned


@admin.register(Destination)
class DestinationAdmin(SuperuserEdits):
    """A vendor's API the configured HTTP actions call."""

    form = DestinationForm
    list_display = [
        "slug",
        "base_url",
        "auth",
        "credential",
        "idempotency_header",
        "rate_limit_per_second",
        "max_concurrency",
    ]
    readonly_fields = ["credential"]

    @admin.display(description="Credential")
    def credential(self, obj):
        return saving.secret_status(obj) if obj.pk else "—"

    def save_model(self, request, obj, form, change):
        saving.save_destination(obj, actor=request.user.get_username())


class HttpActionForm(forms.ModelForm):
    class Meta:
        model = HttpAction
        fields = ["name", *integrations_file.HTTP_ACTION_FIELDS]
        # What each field means, as docs/integrations.md says it (the model's columns name only some).
        help_texts = {
            "schema": "JSON Schema (draft 2020-12) of the event's data: an event that does not match is refused "
            "(422), naming the field.",
            "identity_fields": "The data fields that make two events the same business action: the key is built "
            "from them.",
            "normalisers": "How each identity field is read before the key is built, e.g. identifier, whole_number, "
            "email_address.",
            "fingerprint_fields": "The business fields compared when a key comes again: different values are a "
            "conflict for review; an approval is bound to them.",
            "consequential": "Waits for an approver before anyone performs it.",
            "sensitive_fields": "Data fields masked for all but the workspace's approvers and admins, and never sent "
            "in a notification.",
            "money_fields": 'Amount field to its currency field, e.g. {"amount_cents": "currency"}: shown as money.',
            "summary": "The operation's line in the console's lists, e.g. {request_id} v{version}; empty: its "
            "identity fields.",
            "max_attempts": "Tries before a person must look.",
            "backoff_base_seconds": "The retry wait's base: each wait doubles from it, up to the cap (the Retry "
            "schedule below, once saved).",
            "backoff_cap_seconds": "The longest wait between two tries.",
            "deadline_seconds": "How long after it may first run an operation may still run; past it, a person "
            "must look.",
            "settle_after_seconds": "How long after a try began its request may still land at the vendor: a lookup "
            "that finds nothing is believed only after this.",
            "ordering": "With a whole_number version among the identity fields: Latest wins supersedes an "
            "older version still waiting and refuses one that arrives after a newer one (stale); In order runs "
            "each version after the one before. Otherwise each event stands alone.",
            "on_conflict": "A redelivery with other business fields before it runs: First wins runs it as first "
            "sent; Hold stops it until a person decides.",
            "payload_retention_days": "How long a finished operation keeps its data.",
            "key_retention_days": "How long its key is kept (a redelivery meanwhile is a duplicate); also how old "
            "an event may be before it is stale.",
            "performed_by": "opsconsole's workers send the request below; the caller claims it over the API, acts "
            "itself and reports (then no request or response: only a lookup).",
            "claim_lease_seconds": "Performed by the caller: how long a claim holds it when the caller names no "
            "lease; without an outcome by then it becomes unknown and the lookup asks the vendor.",
            "service_level_seconds": "How long it may take from arrival to a final state: at risk past "
            f"{int(AT_RISK_SHARE * 100)} %, late past all of it (console: Service levels). Empty: no service level.",
            "request": 'Performed by opsconsole: {"method", "path", "headers", "body"}, strings with {{ data.field '
            "}} and {{ key }}. Empty ({}) for a caller's action.",
            "response": 'Where the answer says the record\'s id and a refusal\'s message, e.g. {"record_id": "id"}. '
            "Empty ({}) for a caller's action.",
            "lookup": 'How to ask the vendor whether it has our record: {"path": "/records?key={{ key }}", "found": '
            '"records"}. Required for a caller\'s action; empty: a person decides an unknown outcome.',
            "listing": "The vendor's records over a time window, for the reconciliation audit (optional; "
            "docs/integrations.md).",
        }
        field_classes = {
            name: IndentedJSONField
            for name in integrations_file.HTTP_ACTION_FIELDS
            if isinstance(HttpAction._meta.get_field(name), models.JSONField)
        }

    def clean(self):
        cleaned = super().clean()
        if self.errors:  # a field that did not parse (JSON) already says so
            return cleaned
        proposed = HttpAction(**{name: value for name, value in cleaned.items()})
        if problems := saving.http_action_problems(proposed):
            raise forms.ValidationError(problems)
        return cleaned


@admin.register(HttpAction)
class HttpActionAdmin(SuperuserEdits):
    """An action type defined by configuration: its data schema, identity, policies and request."""

    form = HttpActionForm
    list_display = ["name", "destination", "method_and_path", "consequential", "max_attempts", "updated_at"]
    list_select_related = ["destination"]
    readonly_fields = ["retry_schedule"]

    @admin.display(description="Request")
    def method_and_path(self, obj):
        if obj.performed_by == HttpAction.PerformedBy.CALLER:
            return "performed by the caller (claims)"
        return f"{obj.request.get('method', 'POST')} {obj.request.get('path', '')}"

    @admin.display(description="Retry schedule")
    def retry_schedule(self, obj):
        if obj.pk is None:
            return "shown once saved"
        return format_html("<code>{}</code>", saving.retry_schedule(obj))

    def save_model(self, request, obj, form, change):
        saving.save_http_action(obj, actor=request.user.get_username())
