"""The console's input: a person's reason or note, and the scope of a pause switch."""

from django import forms
from django.contrib import messages

from ledger.actions import registry
from ledger.core import roles, sensitive_notes
from ledger.models import Workspace


def row_id(text, *, bits: int = 63) -> int | None:
    """The row id ``text`` spells, or None for anything else: not a whole number, below 1, or more
    than the column holds (``bits``: 63 for a bigint, 31 for an integer such as a user's id)."""
    if not isinstance(text, str) or not (text.isascii() and text.isdigit()) or len(text) > 19:
        return None
    value = int(text)
    return value if 0 < value < 2**bits else None


def action_choices(empty_label: str) -> list[tuple[str, str]]:
    return [("", empty_label)] + [(name, name) for name in sorted(registry)]


class ReasonForm(forms.Form):
    reason = forms.CharField(label="Reason", max_length=500, widget=forms.Textarea(attrs={"rows": 2}))


class ReplayForm(ReasonForm):
    accept_duplicate_risk = forms.BooleanField(
        label="Replay even if the destination cannot tell whether it already acted (it may act twice)",
        required=False,
    )
    accept_config_change = forms.BooleanField(
        label="Replay under the changed configuration",
        required=False,
    )


class ResolveForm(ReasonForm):
    external_id = forms.CharField(label="Destination record id", max_length=200)

    field_order = ["external_id", "reason"]


class DecisionForm(forms.Form):
    """Approve or reject: the note is optional to approve, required to reject (the service says so)."""

    note = forms.CharField(label="Note", max_length=500, required=False, widget=forms.Textarea(attrs={"rows": 2}))
    fingerprint = forms.CharField(label="Payload fingerprint", widget=forms.HiddenInput)


class PauseForm(forms.Form):
    """The scope and reason of a pause, among the workspaces where the person may pause; only a
    superuser may pull a switch beyond one workspace (everything, or an action everywhere)."""

    workspace = forms.ModelChoiceField(
        label="Workspace", queryset=Workspace.objects.none(), required=False, empty_label="All workspaces"
    )
    action = forms.ChoiceField(label="Action", required=False)
    reason = forms.CharField(label="Reason", max_length=500)

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        self.fields["workspace"].queryset = roles.workspaces(user, roles.PAUSE)
        if not user.is_superuser:
            self.fields["workspace"].required = True
            self.fields["workspace"].empty_label = None
        self.fields["action"].choices = action_choices("All actions")


class ResumeForm(forms.Form):
    workspace = forms.ModelChoiceField(queryset=Workspace.objects.all(), required=False, widget=forms.HiddenInput)
    action = forms.CharField(required=False, widget=forms.HiddenInput)


def first_error(form: forms.Form) -> str:
    """One readable message for a rejected form; nothing was changed when a form is rejected."""
    for field, errors in form.errors.as_data().items():
        label = form.fields[field].label or field
        if errors[0].code == "required":
            return f"{label} is required; nothing was changed."
        return f"{label}: {errors[0].messages[0]} Nothing was changed."
    return "The form was not valid; nothing was changed."


# The extra tag of a message shown beside a field (``templates/console/_refused.html``), not at the top.
BESIDE = "beside:"


def report_refusal(request, refusal: Exception, *, field_id: str, every: bool = False) -> None:
    """Tell the person why a service refused their decision. A note that quotes a sensitive value
    (``sensitive_notes.SensitiveNote``) is reported beside the field ``field_id`` it was written in; the
    refused text itself is not shown again, to anyone (it is kept nowhere, not even in the
    session; the person rewrites it). Anything else is a message at the top of the page, unless
    ``every``: the operation page says every refusal beside the field of the form that was sent
    (where the person's eyes are), and in full at the top when that form is no longer shown
    (``beside_fields``, ``console_text.said_beside``)."""
    if every or isinstance(refusal, sensitive_notes.SensitiveNote):
        refuse_beside(request, str(refusal), field_id=field_id)
    else:
        messages.error(request, str(refusal))


def refuse_beside(request, said: str, *, field_id: str) -> None:
    """Say a refusal beside the field ``field_id`` (``console/_note_help.html``); the banner points to it."""
    messages.error(request, said, extra_tags=f"{BESIDE}{field_id}")
