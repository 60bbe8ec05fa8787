"""The conflicts inbox: every open conflict a person may see, whatever its operation's state, grouped
by operation with the field differences (masked without ``view_sensitive``), and decisions on many
at once for those who may review in the workspace: dismiss all of an operation's conflicts, apply
one and dismiss the rest, or dismiss a selection across operations, each with one reason.

Thin like every console view: find within the person's workspaces (404), check the review role there
(403), call one service of ``ledger.people.conflict_decisions``, report, redirect back to the same filters.

A page holds ``GROUPS_PER_PAGE`` operations, newest first, read by a keyset on the operation id
through the partial index of open conflicts (``conflict_open_idx``), and at most
``SHOWN_PER_GROUP`` conflicts of each: one query for the groups, one for their operations, one for
their conflicts, however many there are, and one for where the held ones were held (when any is:
``ledger.people.holds``).
"""

import django_filters
from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, F, Max, Min, Window
from django.db.models.functions import RowNumber
from django.http import Http404, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from ledger.core import privacy, roles
from ledger.core.roles import REVIEW
from ledger.models import Conflict, Operation, Workspace
from ledger.people import conflict_decisions, holds
from ledger.people.review import ReviewError
from ledger.states import State
from opsconsole.console.forms import ReasonForm, action_choices, first_error, report_refusal
from opsconsole.console.views import console_action, console_page, definition_of, operation_for

GROUPS_PER_PAGE = 20
SHOWN_PER_GROUP = 20
# The most conflicts one selection may name (a page shows at most GROUPS_PER_PAGE * SHOWN_PER_GROUP).
SELECTION_MAX = 500


class ConflictFilter(django_filters.FilterSet):
    workspace = django_filters.ModelChoiceFilter(
        label="Workspace",
        field_name="operation__workspace",
        queryset=Workspace.objects.all(),
        empty_label="All workspaces",
    )
    action = django_filters.ChoiceFilter(
        label="Action", field_name="operation__action", empty_label=None, choices=lambda: action_choices("All actions")
    )

    class Meta:
        model = Conflict
        fields = ["workspace", "action"]


class DecideForm(ReasonForm):
    # The newest conflict the page showed: one that arrived since is not decided unseen.
    seen = forms.IntegerField(label="Newest conflict shown", min_value=0, widget=forms.HiddenInput)


@console_page
def inbox(request):
    user = request.user
    visible = roles.visible(Conflict.objects.filter(status=Conflict.Status.OPEN), user, via="operation__workspace")
    filterset = ConflictFilter(request.GET or None, queryset=visible)
    filterset.filters["workspace"].queryset = roles.workspaces(user)
    older = _id(request.GET.get("older"))
    groups = filterset.qs if older is None else filterset.qs.filter(operation_id__lt=older)
    groups = list(
        groups.order_by()
        .values("operation_id")
        .annotate(
            open=Count("pk"),
            first=Min("created_at"),
            last=Max("created_at"),
            newest=Max("pk"),
        )
        .order_by("-operation_id")[: GROUPS_PER_PAGE + 1]
    )
    more = len(groups) > GROUPS_PER_PAGE
    groups = groups[:GROUPS_PER_PAGE]
    seen = max((group["newest"] for group in groups), default=0)
    rows = _rows(groups, user=user, seen=seen)
    return render(
        request,
        "console/conflicts.html",
        {
            "nav": "conflicts",
            "filter": filterset,
            "groups": rows,
            "seen": seen,
            "older": groups[-1]["operation_id"] if more else None,
            "first": older is None,
            "query": request.GET.urlencode(),
            "can_select": any(row["can_review"] for row in rows),
        },
    )


def _rows(groups: list[dict], *, user, seen: int) -> list[dict]:
    ids = [group["operation_id"] for group in groups]
    operations = (
        Operation.objects.select_related("workspace")
        .only("pk", "key", "action", "state", "attempts", "last_error_category", "workspace__slug")
        .in_bulk(ids)
    )
    held = [pk for pk, op in operations.items() if holds.is_held(op)]
    origins = holds.held_from(held) if held else {}
    shown: dict[int, list[Conflict]] = {pk: [] for pk in ids}
    ranked = (
        Conflict.objects.filter(status=Conflict.Status.OPEN, operation_id__in=ids, pk__lte=seen)
        .annotate(
            place=Window(
                RowNumber(), partition_by=[F("operation_id")], order_by=[F("created_at").desc(), F("pk").desc()]
            ),
        )
        .filter(place__lte=SHOWN_PER_GROUP)
        .select_related("delivery")
        .defer("incoming_payload")
    )
    for conflict in ranked.order_by("operation_id", "-created_at", "-pk") if ids else []:
        shown[conflict.operation_id].append(conflict)
    rows = []
    for group in groups:
        op = operations[group["operation_id"]]
        reveal = privacy.may_view_sensitive(user, op.workspace_id)
        rows.append(
            group
            | {
                "operation": op,
                "conflicts": [
                    {"conflict": c, "differences": privacy.masked_differences(c.differences, op.action, reveal=reveal)}
                    for c in shown[op.pk]
                ],
                "hidden": group["open"] - len(shown[op.pk]),
                "can_review": roles.can(user, REVIEW, op.workspace_id),
                "reviewers": _reviewers(op.workspace),
                "can_apply": _may_take_a_payload(op, origins),
                "held": op.pk in held,
                # Where a decision releases it: awaiting approval, or due to run.
                "awaits_approval": origins.get(op.pk) == State.PENDING_APPROVAL,
            }
        )
    return rows


def _may_take_a_payload(op: Operation, origins: dict) -> bool:
    """Whether a conflict can be applied (``conflict_decisions.apply_conflict`` decides; this only offers it)."""
    action = definition_of(op.action)
    return action is not None and conflict_decisions.may_apply(op, action, origins)


def _id(text) -> int | None:
    """The row id ``text`` spells, or None for anything else (a bigint column holds no more)."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        return None
    return value if 0 < value < 2**63 else None


def _reviewers(workspace) -> str:
    """Who may decide conflicts in the workspace, for a person who may not."""
    return f"{' and '.join(f'{role}s' for role in roles.roles_granting(REVIEW))} of workspace {workspace.slug}"


# --- decisions ---------------------------------------------------------------------------------


def _back(request):
    """The inbox, with the filters (and page) the decision was made on."""
    query = QueryDict(request.POST.get("query", "")).urlencode()
    return redirect(reverse("console:conflicts") + (f"?{query}" if query else ""))


def _decide(request, form, decide, *, field_id):
    """Run ``decide(reason, seen)`` when ``form`` is valid and report what it returns: a
    ``conflict_decisions.Decided``, or why there was nothing left to decide (a second press). A refused form
    or decision changes nothing; a refused reason is reported beside ``field_id``, where it was written."""
    if not form.is_valid():
        messages.error(request, first_error(form))
        return _back(request)
    try:
        done = decide(form.cleaned_data["reason"], form.cleaned_data["seen"])
    except ReviewError as exc:
        report_refusal(request, exc, field_id=field_id)
        return _back(request)
    if isinstance(done, str):
        messages.warning(request, done)
    else:
        _report(request, done)
    return _back(request)


def _report(request, done: conflict_decisions.Decided) -> None:
    said = []
    if done.applied:
        said.append(f"Applied the incoming payload of conflict {done.applied.pk} to {done.applied.operation.key}.")
    if done.dismissed:
        keys = sorted({c.operation.key for c in done.dismissed})
        said.append(
            f"Dismissed {len(done.dismissed)} conflict{'s' if len(done.dismissed) != 1 else ''} "
            f"of {', '.join(keys[:3])}{f' and {len(keys) - 3} more operations' if len(keys) > 3 else ''}; "
            "each decision is in the audit trail."
        )
    if said:
        messages.success(request, " ".join(said))
    if done.skipped:
        decided = ", ".join(f"{c.pk} ({c.status} by {c.decided_by})" for c in done.skipped[:10])
        messages.warning(
            request,
            f"{len(done.skipped)} conflict{'s were' if len(done.skipped) != 1 else ' was'} "
            f"already decided and left as {'they were' if len(done.skipped) != 1 else 'it was'}: "
            f"{decided}{' ...' if len(done.skipped) > 10 else ''}.",
        )


def _reviewable(request, operation_workspaces) -> None:
    """403 unless the person may review in each of the workspaces."""
    if not all(roles.can(request.user, REVIEW, workspace_id) for workspace_id in operation_workspaces):
        raise PermissionDenied


@console_action
def dismiss_operation(request, pk):
    """Dismiss every open conflict of one operation (up to the newest the page showed)."""
    operation = operation_for(request, pk, REVIEW)

    def decide(reason, seen):
        ids = conflict_decisions.open_ids([operation.pk], seen=seen)
        if not ids:
            return f"No conflict of {operation.key} is open any more; nothing was changed."
        return conflict_decisions.dismiss_conflicts(ids, user=request.user, reason=reason)

    return _decide(request, DecideForm(request.POST), decide, field_id=f"group-{operation.pk}-reason")


@console_action
def apply_one(request, pk):
    """Apply one conflict, dismissing its operation's other open ones (up to the newest shown)."""
    conflict = get_object_or_404(
        roles.visible(
            Conflict.objects.select_related("operation__workspace", "delivery"),
            request.user,
            via="operation__workspace",
        ),
        pk=pk,
    )
    _reviewable(request, {conflict.operation.workspace_id})

    def decide(reason, seen):
        still_open = conflict_decisions.open_ids([conflict.operation_id], seen=seen)
        rest = [other for other in still_open if other != conflict.pk]
        return conflict_decisions.apply_dismissing_the_rest(conflict, user=request.user, reason=reason, rest=rest)

    return _decide(request, DecideForm(request.POST), decide, field_id=f"group-{conflict.operation_id}-reason")


@console_action
def dismiss_selected(request):
    """Dismiss the conflicts ticked one by one, and every open conflict of the operations ticked."""
    conflict_ids, operation_ids = _ids(request.POST.getlist("conflict")), _ids(request.POST.getlist("operation"))
    if not conflict_ids and not operation_ids:
        messages.error(request, "Select at least one conflict or operation; nothing was changed.")
        return _back(request)
    if len(conflict_ids) > SELECTION_MAX:
        messages.error(request, f"Select at most {SELECTION_MAX} conflicts at once; nothing was changed.")
        return _back(request)
    user = request.user
    named = dict(
        roles.visible(Conflict.objects.filter(pk__in=conflict_ids), user, via="operation__workspace").values_list(
            "pk", "operation__workspace_id"
        )
    )
    owners = dict(roles.visible(Operation.objects.filter(pk__in=operation_ids), user).values_list("pk", "workspace_id"))
    if len(named) < len(conflict_ids) or len(owners) < len(operation_ids):
        raise Http404("No such conflict or operation in your workspaces.")
    _reviewable(request, {*named.values(), *owners.values()})

    def decide(reason, seen):
        ids = set(conflict_ids) | set(conflict_decisions.open_ids(operation_ids, seen=seen) if operation_ids else ())
        if not ids:
            return "None of the selected operations has an open conflict any more; nothing was changed."
        return conflict_decisions.dismiss_conflicts(ids, user=user, reason=reason)

    return _decide(request, DecideForm(request.POST), decide, field_id="selection-reason")


def _ids(values: list[str]) -> set[int]:
    """The ids a form ticked; 404 for anything else (no form of ours sends it)."""
    ids = {_id(value) for value in values}
    if None in ids:
        raise Http404("Not a conflict or operation id.")
    return ids
