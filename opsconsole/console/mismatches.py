"""The console's reconciliation mismatches: what the audit found open, and a person's decision on
each (acknowledge, adopt the destination's record, replay where the record is missing). Thin like
every console view: find within the person's workspaces (404), check the role there (403), call
one service of ``reconciliation.mismatches``, report."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render

from ledger.core import roles
from ledger.core.roles import REVIEW
from ledger.people.review import ReviewError
from ledger.reads import keyset
from opsconsole.console.forms import ReasonForm, first_error, report_refusal
from opsconsole.console.views import console_action, console_page
from reconciliation import mismatches
from reconciliation.models import Mismatch, ReconciliationRun

PAGE_SIZE = 50
RECENT_RUNS = 5


@console_page
def mismatch_list(request):
    visible = roles.visible(
        Mismatch.objects.filter(status=Mismatch.Status.OPEN).select_related("workspace", "operation"), request.user
    )
    page = keyset.paginate(visible, request.GET, field="created_at", size=PAGE_SIZE)
    reviewable = roles.workspace_ids(request.user, REVIEW)
    return render(
        request,
        "console/mismatches.html",
        {
            "nav": "queue",
            "page": page,
            "rows": [
                {"mismatch": m, "can_review": reviewable is None or m.workspace_id in reviewable}
                for m in page.object_list
            ],
            # A run counts every workspace's findings: shown to those who see every workspace.
            "runs": ReconciliationRun.objects.order_by("-started_at", "-id")[:RECENT_RUNS]
            if request.user.is_superuser
            else None,
            "form": ReasonForm(),
        },
    )


def _decision(decide, said):
    @console_action
    def view(request, pk):
        mismatch = get_object_or_404(roles.visible(Mismatch.objects.select_related("workspace"), request.user), pk=pk)
        if not roles.can(request.user, REVIEW, mismatch.workspace_id):
            raise PermissionDenied
        form = ReasonForm(request.POST)
        if not form.is_valid():
            messages.error(request, first_error(form))
            return redirect("console:mismatches")
        try:
            done = decide(mismatch, user=request.user, reason=form.cleaned_data["reason"])
        except ReviewError as exc:
            report_refusal(request, exc, field_id=f"reason-{mismatch.pk}")
        else:
            messages.success(request, said(mismatch, done))
        return redirect("console:mismatches")

    return view


REPLAYED = {
    "found": "The destination has the record after all ({lookup}); {key} is succeeded again and nothing was sent.",
    "replayed": "Replayed {key}: it will be sent again under the same key ({lookup}).",
    "forced": "Replayed {key} accepting the duplicate risk ({lookup}).",
}

acknowledge = _decision(
    mismatches.acknowledge_mismatch, lambda m, _: f"Acknowledged mismatch {m.pk} ({m.kind}, {m.reference})."
)
adopt = _decision(
    mismatches.adopt_mismatch, lambda m, _: f"Adopted record {m.record_id}: {m.reference} is succeeded with it."
)
replay = _decision(
    mismatches.replay_mismatch,
    lambda m, done: REPLAYED[done.verdict].format(key=m.reference, lookup=done.lookup or "not asked"),
)
