"""The console's deliveries page: the arrivals that did not become work (invalid, stale, in
conflict with what a key holds; on request, signed webhooks that no rule maps), newest first,
with the errors they were refused with (messages only: intake never stores the values). Above
them, the hooks' refusals of arrivals not shown to be their sender's, as counts per address
(``ledger.intake.refusals``). Any member of a workspace sees its own."""

import django_filters
from django.shortcuts import render

from ledger.core import roles
from ledger.intake import refusals
from ledger.models import REFUSED_OUTCOMES, Delivery, Workspace
from ledger.reads import keyset
from ledger.reads.finding import DELIVERY_COLUMNS
from opsconsole.console.views import console_page

PAGE_SIZE = 50


class DeliveryFilter(django_filters.FilterSet):
    outcome = django_filters.ChoiceFilter(
        label="Outcome",
        empty_label="All refused",
        # Ignored webhooks are not refused (the sender did nothing wrong), but a person asking why
        # an event did nothing looks for them here.
        choices=[(outcome.value, outcome.label) for outcome in [*REFUSED_OUTCOMES, Delivery.Outcome.IGNORED]],
    )
    workspace = django_filters.ModelChoiceFilter(
        label="Workspace", queryset=Workspace.objects.all(), empty_label="All workspaces"
    )
    source = django_filters.ChoiceFilter(label="Source", empty_label="All sources", choices=Delivery.Source.choices)

    class Meta:
        model = Delivery
        fields = ["outcome", "workspace", "source"]

    def filter_queryset(self, queryset):
        # Without a chosen outcome, every refused one; never both, as "outcome IN (..) AND outcome
        # = ..": the planner would multiply the two, expect almost no row, and read every
        # delivery that was not accepted instead of the newest through the refused ones' index.
        if not self.form.cleaned_data.get("outcome"):
            queryset = queryset.filter(outcome__in=REFUSED_OUTCOMES)
        return super().filter_queryset(queryset)


@console_page
def delivery_list(request):
    # A conflict's field names are shown, never its payloads (they hold the values).
    deliveries = roles.visible(Delivery.objects.select_related("workspace", "conflict"), request.user).only(
        *DELIVERY_COLUMNS, "conflict__id", "conflict__differences", "conflict__status"
    )
    # Always bound, even to no parameters: filter_queryset keeps the list to refused deliveries.
    filterset = DeliveryFilter(request.GET, queryset=deliveries)
    filterset.filters["workspace"].queryset = roles.workspaces(request.user)
    page = keyset.paginate(filterset.qs, request.GET, field="received_at", size=PAGE_SIZE)
    context = {"nav": "deliveries", "filter": filterset, "page": page, "counted": _counted(request, filterset)}
    return render(request, "console/deliveries.html", context)


def _counted(request, filterset) -> list[dict]:
    """The hooks' counted refusals, on the list's first page, unless the filter leaves out webhooks
    or asks for an outcome they are not (a conflict, a stale event)."""
    chosen = filterset.form.cleaned_data
    paging = request.GET.get("older") or request.GET.get("newer")
    other_source = chosen.get("source") not in ("", None, Delivery.Source.WEBHOOK)
    other_outcome = chosen.get("outcome") not in ("", None, Delivery.Outcome.INVALID, Delivery.Outcome.IGNORED)
    if paging or other_source or other_outcome:
        return []
    return refusals.recent(request.user, workspace=chosen.get("workspace"))
