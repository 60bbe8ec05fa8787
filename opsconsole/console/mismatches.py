"""The console's reconciliation mismatches as a work list: what the audit found open, filtered (kind,
action, destination, age, lookup answer), counted, and decided many at once (acknowledge with a
reason, or look the missing records up at the destination first) or one at a time (adopt the
destination's record, replay a record confirmed absent). Thin like every console view: find within
the person's workspaces (404), check the role there (403), call one service of
``reconciliation.mismatches``, report."""

import secrets

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone

from ledger.core import roles
from ledger.core.roles import REVIEW
from ledger.people.bulk_actions import MAX_OPERATIONS, BulkActionError
from ledger.people.review import ReviewError
from ledger.reads import keyset
from opsconsole.console import tables
from opsconsole.console.bulk import OperationIdsField, SelectAllMatching, changed_since_counted
from opsconsole.console.forms import ReasonForm, first_error, report_refusal
from opsconsole.console.views import console_action, console_page
from reconciliation import mismatches, selectors
from reconciliation.models import Mismatch, ReconciliationRun

PAGE_SIZE = 50
RECENT_RUNS = 5


class MismatchFilterForm(forms.Form):
    kind = forms.ChoiceField(label="Kind", required=False, choices=[("", "any kind"), *Mismatch.Kind.choices])
    action = forms.ChoiceField(label="Action", required=False)
    destination = forms.ChoiceField(label="Destination", required=False)
    age = forms.ChoiceField(
        label="Found",
        required=False,
        choices=[("", "any time"), *((name, words) for name, (words, _, _) in selectors.AGES.items())],
    )
    lookup = forms.ChoiceField(
        label="Looked up", required=False, choices=[("", "any answer"), *selectors.LOOKUPS.items()]
    )

    def __init__(self, data, *, user):
        super().__init__(data)
        named = selectors.filter_choices(user)
        for name, anything in (("action", "any action"), ("destination", "any destination")):
            # The one chosen stays offered once none of its mismatches is open: the list is then empty.
            given = (data or {}).get(name, "")
            offered = sorted(set(named[name]) | ({given} if given else set()))
            self.fields[name].choices = [("", anything), *((value, value) for value in offered)]

    def chosen(self) -> selectors.MismatchFilter:
        """The filter as given, or none at all when a value is not one offered (the form says which)."""
        if not self.is_valid():
            return selectors.MismatchFilter()
        return selectors.MismatchFilter(**self.cleaned_data)


class MismatchIdsField(OperationIdsField):
    default_error_messages = {"invalid": "The selection is not a list of mismatches."}


class MismatchBulkForm(SelectAllMatching):
    """One decision (the button pressed) for the mismatches ticked or for all those the list's
    filter holds; a reason (required to acknowledge), and the one-time token a lookup's bulk action
    is made with."""

    decision = forms.ChoiceField(
        label="Decision", choices=[("acknowledge", "acknowledge"), ("lookup", "look up")], widget=forms.HiddenInput
    )
    reason = forms.CharField(label="Reason", max_length=500, required=False)
    token = forms.CharField(label="The form's one-time token (reload the page)", max_length=64)
    mismatch = MismatchIdsField(label="Mismatches", required=False)

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        if cleaned.get("all_matching"):
            if not (cleaned.get("matching_count") and cleaned.get("matching_digest")):
                raise forms.ValidationError("The list's selection is incomplete; reload the page.")
        elif not cleaned.get("mismatch"):
            self.add_error("mismatch", forms.ValidationError("Select at least one mismatch.", code="empty"))
        return cleaned


@console_page
def mismatch_list(request):
    filter_form = MismatchFilterForm(request.GET or None, user=request.user)
    chosen = filter_form.chosen()
    listed = selectors.open_mismatches(request.user, chosen, now=timezone.now())
    page = keyset.paginate(
        listed.select_related("workspace", "operation", "run"), request.GET, field="created_at", size=PAGE_SIZE
    )
    # Each kind's count under the other filters (the tabs), and the list's own.
    every_kind = selectors.open_mismatches(request.user, chosen.of_every_kind(), now=timezone.now())
    counts, capped = selectors.counts_by_kind(every_kind)
    count = counts[chosen.kind] if chosen.kind else sum(counts.values())
    reviewable = roles.workspace_ids(request.user, REVIEW)
    can_decide = reviewable != set()
    return render(
        request,
        "console/mismatches.html",
        {
            "nav": "queue",
            "filter": {"form": filter_form},
            "chosen": chosen,
            "page": page,
            "count": count,
            "count_capped": capped,
            # The kinds of what the other filters keep, each a link to that kind alone.
            "kinds": [
                (kind, label, counts[kind], _with(request.GET, kind=kind)) for kind, label in Mismatch.Kind.choices
            ],
            "rows": [
                {"mismatch": m, "can_review": reviewable is None or m.workspace_id in reviewable}
                for m in page.object_list
            ],
            "can_decide": can_decide,
            "bulk_token": secrets.token_urlsafe(24),
            # Of those listed, the ones the person may decide (a viewer elsewhere sees more than that).
            "matching": tables.matching_selection(
                request, _decidable(listed, request.user), count, shown=len(page.object_list), limit=MAX_OPERATIONS
            )
            if can_decide and not capped
            else None,
            "matching_limit": MAX_OPERATIONS,
            # A run counts every workspace's findings: shown to those who see every workspace.
            "runs": ReconciliationRun.objects.order_by("-started_at", "-id")[:RECENT_RUNS]
            if request.user.is_superuser
            else None,
            "form": ReasonForm(),
        },
    )


def _decidable(listed, user):
    return roles.visible(listed, user, capability=REVIEW)


def _with(params, **changed) -> str:
    query = params.copy()
    for paging in ("older", "newer", "page"):
        query.pop(paging, None)
    for name, value in changed.items():
        query[name] = value
    return query.urlencode()


@console_action
def bulk_decision(request):
    """Acknowledge, or look up, the mismatches ticked or all those the list's filter holds."""
    form = MismatchBulkForm(request.POST)
    back = f"{reverse('console:mismatches')}?{request.POST.get('matching', '')}".rstrip("?")
    if not form.is_valid():
        refused = form.non_field_errors()
        messages.error(request, f"{refused[0]} Nothing was changed." if refused else first_error(form))
        return redirect(back)
    data = form.cleaned_data
    ids = data["mismatch"]
    if data["all_matching"]:
        chosen = MismatchFilterForm(QueryDict(data["matching"]), user=request.user).chosen()
        listed = selectors.open_mismatches(request.user, chosen, now=timezone.now())
        ids, refusal = changed_since_counted(_decidable(listed, request.user), data, noun="mismatches")
        if refusal:
            messages.error(request, refusal)
            return redirect(back)
    _check_selection(request.user, ids)
    try:
        if data["decision"] == "acknowledge":
            decided = mismatches.acknowledge_mismatches(ids, user=request.user, reason=data["reason"])
        else:
            bulk, created = mismatches.look_up_mismatches(
                ids, user=request.user, token=data["token"], reason=data["reason"]
            )
    except (ReviewError, BulkActionError) as exc:
        report_refusal(request, exc, field_id="bulk-reason")
        return redirect(back)
    if data["decision"] == "acknowledge":
        messages.success(request, f"Acknowledged {decided:,} mismatch{'es' if decided != 1 else ''}: each is audited.")
        return redirect(back)
    if created:
        messages.success(
            request,
            f"Looking up {bulk.total:,} record{'s' if bulk.total != 1 else ''} at the destination by key: nothing is "
            "sent. The mismatches page shows each answer.",
        )
    else:
        messages.info(request, "This form was already submitted; here is the lookup it started.")
    return redirect("console:bulk", pk=bulk.pk)


def _check_selection(user, ids: list[int]) -> None:
    """404 if any selected mismatch is outside the person's workspaces; 403 if they may not decide
    in one of those that hold them."""
    found = dict(roles.visible(Mismatch.objects.filter(pk__in=ids), user).values_list("pk", "workspace_id"))
    if len(found) != len(ids):
        raise Http404("No such mismatch.")
    if not all(roles.can(user, REVIEW, workspace_id) for workspace_id in set(found.values())):
        raise PermissionDenied


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
