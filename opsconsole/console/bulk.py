"""The console's failure groups and bulk actions: the operations that need review grouped by how
they failed, a replay or cancel of a whole group or of a selection from the queue with one reason
(``ledger.people.bulk_actions``, run by the workers), and the action's progress, refreshed by htmx while
it runs. Thin like every console view: find within the person's workspaces (404), check the role
there (403), call one service, report."""

import secrets

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.http import Http404, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import urlencode

from ledger.core import roles
from ledger.core.roles import REVIEW
from ledger.models import BulkAction, BulkItem, Control, Operation
from ledger.people.bulk_actions import MAX_OPERATIONS, BulkActionError, submit_bulk_action
from ledger.reads import keyset
from ledger.reads.failure_groups import Criterion, example_answers, failure_groups
from opsconsole.console import tables
from opsconsole.console.forms import ReplayForm, first_error, report_refusal
from opsconsole.console.views import console_action, console_page

ITEMS_PAGE_SIZE = 50
REASONS_SHOWN = 20
REFRESH = "every 2s"


class OperationIdsField(forms.Field):
    """The ids of the operations ticked in the queue (``operation=1&operation=2``)."""

    widget = forms.MultipleHiddenInput
    default_error_messages = {"invalid": "The selection is not a list of operations."}

    def to_python(self, value):
        try:
            ids = [int(item) for item in value or []]
        except (TypeError, ValueError):
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid") from None
        if len(ids) > MAX_OPERATIONS:
            raise forms.ValidationError(f"Select at most {MAX_OPERATIONS} operations at once.", code="too_many")
        return list(dict.fromkeys(ids))

    def validate(self, value):
        pass  # an empty selection is refused by the form, unless it names a failure group


class SelectAllMatching(forms.Form):
    """The fields of "select all N matching" (templates/console/_select_all_matching.html): the list's
    query, and the N and digest of the ids it counted (``tables.matching_digest``);
    ``changed_since_counted`` compares them with the list as it is when the form is submitted."""

    all_matching = forms.BooleanField(required=False)
    matching = forms.CharField(required=False, max_length=4000, widget=forms.HiddenInput)
    matching_count = forms.IntegerField(required=False, min_value=1, max_value=MAX_OPERATIONS, widget=forms.HiddenInput)
    matching_digest = forms.RegexField(required=False, regex=r"^[0-9a-f]{64}$", widget=forms.HiddenInput)


def changed_since_counted(queryset, data: dict, *, noun: str) -> tuple[list, str]:
    """The ids ``queryset`` (the list's query run again) holds now, if they are exactly those the
    person saw counted; else why not (nothing is to be done)."""
    ids, digest = tables.matching_ids(queryset, limit=MAX_OPERATIONS)
    seen = data["matching_count"]
    if len(ids) != seen or digest != data["matching_digest"]:
        now = f"more than {MAX_OPERATIONS:,}" if len(ids) > MAX_OPERATIONS else f"{len(ids):,}"
        return [], (
            f"The list changed since you loaded it: you saw {seen:,} {noun}, it now holds {now}. "
            "Nothing was changed; look at the list again before acting on all of it."
        )
    return ids, ""


class BulkForm(ReplayForm, SelectAllMatching):
    """One reason for every operation, the risks a replay may accept (as the single replay form
    offers), the kind (the button pressed) and the one-time token that makes a second press land
    on the same action. Either a failure group or a selection of operations."""

    kind = forms.ChoiceField(
        label="Kind",
        choices=[(BulkAction.Kind.REPLAY, "replay"), (BulkAction.Kind.CANCEL, "cancel")],
        widget=forms.HiddenInput,
    )
    token = forms.CharField(
        label="The form's one-time token (reload the page)", max_length=64, widget=forms.HiddenInput
    )
    group = forms.CharField(required=False, widget=forms.HiddenInput)
    operation = OperationIdsField(label="Operations", required=False)

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        if cleaned.get("group"):
            cleaned["criterion"] = Criterion.parse(cleaned["group"])
            if cleaned["criterion"] is None:
                raise forms.ValidationError("This failure group is not one the console knows; reload the page.")
        elif cleaned.get("all_matching"):
            if not (cleaned.get("matching_count") and cleaned.get("matching_digest")):
                raise forms.ValidationError("The list's selection is incomplete; reload the page.")
        elif not cleaned.get("operation"):
            self.add_error("operation", forms.ValidationError("Select at least one operation.", code="empty"))
        return cleaned


def new_token() -> str:
    return secrets.token_urlsafe(24)


def may_bulk(user) -> bool:
    """Whether the person may review somewhere (and so replay or cancel in bulk)."""
    return roles.workspace_ids(user, REVIEW) != set()


@console_page
def failures(request):
    visible = roles.visible(Operation.objects.all(), request.user)
    groups, capped = failure_groups(visible)
    example_answers(groups, visible)
    can_act = may_bulk(request.user)
    queue = reverse("console:queue")
    for group in groups:
        group.queue_url = f"{queue}?{urlencode({'state': 'needs_review', 'group': str(group.criterion)})}"
        group.token = new_token() if can_act else ""
    return render(
        request,
        "console/failures.html",
        {
            "nav": "failures",
            "groups": groups,
            "capped": capped,
            "can_act": can_act,
        },
    )


@console_action
def submit(request):
    """Start a bulk action from a failure group or from the queue's selection; then its progress."""
    form = BulkForm(request.POST)
    back = "console:failures" if request.POST.get("group") else "console:queue"
    if not form.is_valid():
        refused = form.non_field_errors()
        messages.error(request, f"{refused[0]} Nothing was changed." if refused else first_error(form))
        return redirect(back)
    data = form.cleaned_data
    criterion = data.get("criterion")
    if data.get("all_matching") and criterion is None:
        ids, refusal = _all_matching(request.user, data)
        if refusal:
            messages.error(request, refusal)
            return redirect(f"{reverse('console:queue')}?{data['matching']}")
        data["operation"] = ids
    if criterion is None:
        _check_selection(request.user, data["operation"])
    elif not may_bulk(request.user):
        raise PermissionDenied
    try:
        bulk, created = submit_bulk_action(
            user=request.user,
            kind=data["kind"],
            reason=data["reason"],
            token=data["token"],
            operation_ids=data["operation"] if criterion is None else None,
            criterion=criterion,
            accept_duplicate_risk=data["accept_duplicate_risk"],
            accept_config_change=data["accept_config_change"],
        )
    except BulkActionError as exc:
        if criterion is None:
            # The queue does not keep a selection across the redirect: said at the top of the page.
            messages.error(request, str(exc))
        else:
            report_refusal(request, exc, field_id=f"reason-{criterion.digest}")
        return redirect(back)
    verb = "Replaying" if bulk.kind == BulkAction.Kind.REPLAY else "Cancelling"
    if created:
        more = (
            (
                f" They are the group's oldest {MAX_OPERATIONS}, the most one action takes: act on the rest "
                "once it is done."
            )
            if criterion is not None and bulk.total == MAX_OPERATIONS
            else ""
        )
        messages.success(
            request, f"{verb} {bulk.total} operation{'s' if bulk.total != 1 else ''}: each is audited on its own.{more}"
        )
    else:
        messages.info(request, "This form was already submitted; here is the bulk action it started.")
    return redirect("console:bulk", pk=bulk.pk)


def _all_matching(user, data: dict) -> tuple[list[int], str]:
    """The ids of the operations the queue's query lists now, if they are exactly those the person
    saw counted (their number and digest); else why not (nothing is done)."""
    switches = list(Control.objects.filter(paused=True).select_related("workspace").order_by("id"))
    listing = tables.listing_for(QueryDict(data["matching"]), user, switches)
    return changed_since_counted(listing.filterset.qs, data, noun="operations")


def _check_selection(user, ids: list[int]) -> None:
    """404 if any selected operation is outside the person's workspaces; 403 if they may not
    review in one of those that hold them."""
    found = dict(roles.visible(Operation.objects.filter(pk__in=ids), user).values_list("pk", "workspace_id"))
    if len(found) != len(ids):
        raise Http404("No such operation.")
    if not all(roles.can(user, REVIEW, workspace_id) for workspace_id in set(found.values())):
        raise PermissionDenied


@console_page
def progress(request, pk):
    """The bulk action's progress: shown to the person who submitted it (and superusers)."""
    mine = Q() if request.user.is_superuser else Q(user=request.user)
    bulk = get_object_or_404(BulkAction.objects.filter(mine).select_related("user"), pk=pk)
    items = BulkItem.objects.filter(bulk_action=bulk).select_related("operation")
    page = keyset.paginate(items, request.GET, field="created_at", size=ITEMS_PAGE_SIZE)
    reasons = list(
        BulkItem.objects.filter(bulk_action=bulk, outcome__in=[BulkItem.Outcome.SKIPPED, BulkItem.Outcome.FAILED])
        .order_by()
        .values("outcome", "detail")
        .annotate(n=Count("pk"))
        .order_by("-n", "detail")[:REASONS_SHOWN]
    )
    context = {
        "nav": "queue" if bulk.kind == BulkAction.Kind.LOOKUP else "failures",
        "bulk": bulk,
        "page": page,
        "reasons": reasons,
        # Only the first page moves while the action runs; an older page stays put.
        "refresh": REFRESH if bulk.status != BulkAction.Status.FINISHED and page.first else "",
        "criterion": Criterion.parse(bulk.criterion),
    }
    template = "console/_bulk_progress.html" if request.htmx else "console/bulk.html"
    return render(request, template, context)
