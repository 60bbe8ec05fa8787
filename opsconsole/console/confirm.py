"""The approve confirmation: before an approval counts, the page repeats what is being approved (the
action, key, workspace, payload with its amount and customer as this person may see them, who is
behind it, the payload's fingerprint). GET shows it; its Confirm POSTs the fingerprint shown, and
``approvals.approve_operation`` approves only that payload. Reject stays on the operation page.
Once approved, the person lands on the next operation awaiting their decision."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from ledger.core import privacy
from ledger.core.roles import APPROVE
from ledger.people import approvals, may
from opsconsole.console import approval_list, labels
from opsconsole.console.forms import DecisionForm, first_error, report_refusal
from opsconsole.console.views import console_page, definition_of, operation_for


@console_page
@require_http_methods(["GET", "POST"])
def approve(request, pk):
    operation = operation_for(request, pk, APPROVE)
    if request.method == "POST":
        return _approve(request, operation)
    if may.decide_refusal(operation):
        messages.error(
            request, f"{operation.key} is {operation.state}; only an operation awaiting approval can be approved."
        )
        return redirect("console:operation", pk=pk)
    contributions = list(operation.contributions.select_related("user").order_by("created_at", "id"))
    if work := may.own_work(request.user, contributions):
        messages.error(
            request, f"You {' and '.join(work)} {operation.key}, so another approver must approve it (four eyes)."
        )
        return redirect("console:operation", pk=pk)
    reveal = privacy.may_view_sensitive(request.user, operation.workspace_id)
    shown = privacy.masked(operation.payload, operation.action, reveal=reveal)
    return render(
        request,
        "console/approve_confirm.html",
        {
            "nav": "queue",
            "operation": operation,
            "payload": labels.payload_rows(shown, definition_of(operation.action)),
            "masking": shown != operation.payload,
            "contributions": contributions,
            "form": DecisionForm(initial={"fingerprint": operation.fingerprint}),
        },
    )


def _approve(request, operation):
    """Approve the payload whose fingerprint the confirmation showed; without it, nothing."""
    form = DecisionForm(request.POST)
    if not form.is_valid():
        messages.error(request, first_error(form))
        return redirect("console:operation", pk=operation.pk)
    try:
        approvals.approve_operation(
            operation, user=request.user, note=form.cleaned_data["note"], fingerprint=form.cleaned_data["fingerprint"]
        )
    except approvals.SensitiveApprovalNote as exc:
        # Back to the confirmation, where the note is written, with the refusal beside it.
        report_refusal(request, exc, field_id="approval-note")
        return redirect("console:approve", pk=operation.pk)
    except approvals.ApprovalError as exc:
        messages.error(request, str(exc))
        return redirect("console:operation", pk=operation.pk)
    # On to the next operation awaiting this person's decision, not back to the one just approved.
    return approval_list.landing(request, operation.key, "Approved")
