"""What a person decides from an operation's page or the controls page: replay, resolve, look up,
cancel, approve or reject, apply or dismiss a conflict, pause and resume. Each a thin POST view over
one service call; the outcome is a message on the page it returns to."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect

from ledger.core import roles
from ledger.core.roles import APPROVE, PAUSE, REVIEW
from ledger.people import approvals, cancellations, conflict_decisions, replays, resolutions, review
from ledger.people.pause import NotPaused, set_paused
from opsconsole.console import approval_list
from opsconsole.console.forms import (
    DecisionForm,
    PauseForm,
    ReasonForm,
    ReplayForm,
    ResolveForm,
    ResumeForm,
    first_error,
    refuse_beside,
    report_refusal,
)
from opsconsole.console.templatetags.console_time import text_with_times, when_text
from opsconsole.console.views import conflict_for, console_action, operation_for, person_of
from reconciliation.reconcile import reconcile_operation

LOOKUP_VERDICTS = {
    "found": "The destination has the record: {key} is now succeeded.",
    "absent": "The destination has no record: {key} will be sent again under the same key.",
    "cannot_tell": "The destination could not tell ({why}); {key} stays unknown and is asked again at {next}.",
    "gave_up": "The destination could not tell ({why}); {key} now needs review.",
    "not_due": "{key} is no longer unknown; nothing was asked.",
}


def _back(op_pk):
    return redirect("console:operation", pk=op_pk)


def _decide(request, op_pk, form, decide, *, field_id):
    """Run ``decide(**cleaned_data)`` (it returns what to tell the person) when ``form`` is valid;
    report the outcome on the operation page (a refused reason beside ``field_id``, the field it
    was written in). A refused form or decision changes nothing."""
    if not form.is_valid():
        refuse_beside(request, first_error(form), field_id=field_id)
        return _back(op_pk)
    try:
        said = decide(**form.cleaned_data)
    except review.ReviewError as exc:
        report_refusal(request, exc, field_id=field_id, every=True)
    else:
        messages.success(request, said)
    return _back(op_pk)


@console_action
def replay(request, pk):
    op = operation_for(request, pk, REVIEW)

    def decide(reason, accept_duplicate_risk, accept_config_change):
        done = replays.replay_operation(
            op,
            user=request.user,
            reason=reason,
            accept_duplicate_risk=accept_duplicate_risk,
            accept_config_change=accept_config_change,
        )
        if done.verdict == "found":
            return f"Nothing was sent: {done.lookup}. {op.key} is now succeeded."
        if done.verdict == "forced":
            return f"Replayed {op.key} accepting the duplicate risk ({done.lookup}); audited as replay_forced."
        return f"Replayed {op.key}" + (f" ({done.lookup})." if done.lookup else ".")

    return _decide(request, pk, ReplayForm(request.POST), decide, field_id="operation-reason")


@console_action
def resolve(request, pk):
    op = operation_for(request, pk, REVIEW)

    def decide(external_id, reason):
        resolutions.resolve_operation(op, user=request.user, external_id=external_id, reason=reason)
        return f"Resolved {op.key}: succeeded with destination record {op.external_id}."

    return _decide(request, pk, ResolveForm(request.POST), decide, field_id="resolve-reason")


@console_action
def look_up(request, pk):
    """Ask the destination now about an unknown operation, instead of waiting for its next lookup."""
    op = operation_for(request, pk, REVIEW)
    verdict = reconcile_operation(op, actor=person_of(request), asked_by_person=True)
    op.refresh_from_db()
    text = LOOKUP_VERDICTS[verdict].format(
        key=op.key,
        why=text_with_times(op.last_error_message, op.last_error_times) or "no answer",
        next=when_text(op.next_attempt_at),
    )
    (messages.success if verdict in ("found", "absent") else messages.warning)(request, text)
    return _back(pk)


@console_action
def cancel(request, pk):
    op = operation_for(request, pk, REVIEW)

    def decide(reason):
        done = cancellations.cancel_operation(op, user=request.user, reason=reason)
        if done.verdict == "found":
            return f"Nothing was cancelled: {done.lookup}. {op.key} is now succeeded."
        return f"Cancelled {op.key}" + (f" ({done.lookup})." if done.lookup else ".")

    return _decide(request, pk, ReasonForm(request.POST), decide, field_id="operation-reason")


@console_action
def apply_conflict(request, pk):
    conflict = conflict_for(request, pk)

    def decide(reason):
        conflict_decisions.apply_conflict(conflict, user=request.user, reason=reason)
        return f"Applied the incoming payload of conflict {conflict.pk} to {conflict.operation.key}."

    return _decide(
        request, conflict.operation_id, ReasonForm(request.POST), decide, field_id=f"conflict-{conflict.pk}-reason"
    )


@console_action
def dismiss_conflict(request, pk):
    conflict = conflict_for(request, pk)

    def decide(reason):
        conflict_decisions.dismiss_conflict(conflict, user=request.user, reason=reason)
        return f"Dismissed conflict {conflict.pk} on {conflict.operation.key}."

    return _decide(
        request, conflict.operation_id, ReasonForm(request.POST), decide, field_id=f"conflict-{conflict.pk}-reason"
    )


def _decision(decide, verb):
    @console_action
    def view(request, pk):
        op = operation_for(request, pk, APPROVE)
        form = DecisionForm(request.POST)
        if not form.is_valid():
            refuse_beside(request, first_error(form), field_id="approval-note")
            return _back(pk)
        try:
            decide(op, user=request.user, note=form.cleaned_data["note"], fingerprint=form.cleaned_data["fingerprint"])
        except approvals.ApprovalError as exc:
            report_refusal(request, exc, field_id="approval-note", every=True)
            return _back(pk)
        # On to the next operation awaiting this person's decision, not back to the one just decided.
        return approval_list.landing(request, op.key, verb)

    return view


reject = _decision(approvals.reject_operation, "Rejected")


@console_action
def pause(request):
    if not request.user.is_superuser and not roles.workspace_ids(request.user, PAUSE):
        raise PermissionDenied
    form = PauseForm(request.POST, user=request.user)
    if not form.is_valid():
        messages.error(request, first_error(form))
        return redirect("console:controls")
    control = set_paused(
        paused=True,
        actor=person_of(request),
        reason=form.cleaned_data["reason"],
        workspace=form.cleaned_data["workspace"],
        action=form.cleaned_data["action"],
    )
    messages.success(request, f"Paused {control.scope_label}.")
    return redirect("console:controls")


@console_action
def resume(request):
    form = ResumeForm(request.POST)
    if not form.is_valid():
        messages.error(request, first_error(form))
        return redirect("console:controls")
    workspace = form.cleaned_data["workspace"]
    if not roles.can(request.user, PAUSE, workspace.pk if workspace else None):
        raise PermissionDenied
    try:
        control = set_paused(
            paused=False, actor=person_of(request), workspace=workspace, action=form.cleaned_data["action"]
        )
    except NotPaused as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Resumed {control.scope_label}.")
    return redirect("console:controls")
