"""The conflicts inbox as a work list: every conflict a person may see, one row each, the differences
first (labelled as the action's schema names them, money with its currency, masked without
``view_sensitive``), in three states counted at the top:

- held: the operation has not run (held by the conflict, awaiting approval, or not yet due), so a
  decision changes what runs: listed first, each row with its decision, or, for a person who may not
  decide it (an operator facing a refund's amounts, ``ledger.people.may.conflict_refusal``), who can
  and a form to assign the operation to one of them;
- dismiss only: the operation ran, its recorded payload stays: grouped by action, each group with
  "dismiss all N matching" (the list's query, N and the digest of the ids counted, as the queue's
  select-all sends them: ``tables.matching_digest``), and ticks for a selection;
- decided: applied or dismissed, by whom and when.

Thin like every console view: find within the person's workspaces (404), check the role there
(403), call one service of ``ledger.people.conflict_decisions``, report, redirect back to the same
filters. Whether an open conflict is held is its operation's to say, so the page reads the open
conflicts with their operations once (``open_conflicts``) and takes from that one read the counts,
the groups, each list's ids (newest first, a keyset on the conflict id) and each group's digest;
then one query loads the rows shown, one counts the decided ones (up to a bound), and one reads where
the held ones were held (``ledger.people.holds``), however many there are.
"""

from typing import NamedTuple

import django_filters
from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import BooleanField, Count, ExpressionWrapper, Q, QuerySet
from django.http import Http404, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from ledger.core import privacy, roles
from ledger.core.roles import REVIEW
from ledger.intake.reservation import CONFLICT_HOLD
from ledger.models import Conflict, Membership, Operation, Workspace
from ledger.people import conflict_decisions, holds
from ledger.people.assignment import may_take
from ledger.people.may import conflict_refusal, deciders_of_sensitive, sensitive_differences
from ledger.people.review import ReviewError
from ledger.states import State
from opsconsole.console import labels, tables
from opsconsole.console.forms import ReasonForm, action_choices, first_error, report_refusal, row_id
from opsconsole.console.views import console_action, console_page, definition_of

PAGE_SIZE = 50  # rows of one list (held, one action's dismiss-only, decided)
ROWS_PER_ACTION = 10  # rows of each action's group where the list shows every action
# The most conflicts one decision may name: a selection, or "dismiss all N matching".
SELECTION_MAX = 1000
# Decided conflicts only grow: counted up to this many ("1,000+"), never all of them per page view.
DECIDED_COUNTED = 1000
NAMES_SHOWN = 5

HELD, DISMISS_ONLY, DECIDED = "held", "dismiss_only", "decided"
STATES = [
    (HELD, "Held: a decision changes what runs"),
    (DISMISS_ONLY, "Dismiss only: the operation ran"),
    (DECIDED, "Decided"),
]


def not_run() -> Q:
    """The conflicts (of ``Conflict``) whose operation has not run: a decision changes what runs."""
    return Q(operation__attempts=0) & (
        Q(operation__state__in=[State.PENDING, State.PENDING_APPROVAL])
        | Q(operation__state=State.NEEDS_REVIEW, operation__last_error_category=CONFLICT_HOLD)
    )


class OpenConflict(NamedTuple):
    """An open conflict as the lists sort, count and group it (a tuple: thousands are made a page)."""

    pk: int
    action: str
    workspace_id: int
    held: bool  # ``not_run``: listed as held, else dismiss only


def open_conflicts(conflicts: QuerySet) -> list[OpenConflict]:
    """The open ones of ``conflicts``, newest first, each held or not (``not_run``), in one query:
    the open conflicts and their operations, read once for the whole page. Read once per count,
    list, group and digest instead, each time looking every operation up, 8,000 open conflicts at
    5,000,000 operations cost 350-640 ms a page (docs/performance.md). The read grows with the open
    conflicts, which people decide, not with the table."""
    found = (
        conflicts.filter(status=Conflict.Status.OPEN)
        .annotate(held=ExpressionWrapper(not_run(), output_field=BooleanField()))
        .order_by("-pk")
        .values_list("pk", "operation__action", "operation__workspace_id", "held")
    )
    return list(map(OpenConflict._make, found))


def in_state(conflicts: QuerySet, state: str) -> QuerySet:
    """``conflicts`` in one of ``STATES`` ("": every open one)."""
    open_ = conflicts.filter(status=Conflict.Status.OPEN)
    if state == HELD:
        return open_.filter(not_run())
    if state == DISMISS_ONLY:
        return open_.exclude(not_run())
    if state == DECIDED:
        return conflicts.exclude(status=Conflict.Status.OPEN)
    return open_


class ConflictFilter(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(label="State", choices=STATES, empty_label="Every open one", method="by_state")
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
        fields = ["state", "workspace", "action"]

    def by_state(self, queryset, name, value):
        return queryset  # applied by the view: the counts at the top read the other filters alone


class DecideForm(ReasonForm):
    # The newest conflict the page showed: one that arrived since is not decided unseen.
    seen = forms.IntegerField(label="Newest conflict shown", min_value=0, widget=forms.HiddenInput)


class MatchingForm(ReasonForm):
    """ "Dismiss all N matching": the list's query, and the N and digest of the ids it counted."""

    matching = forms.CharField(max_length=4000, widget=forms.HiddenInput)
    matching_count = forms.IntegerField(min_value=1, max_value=SELECTION_MAX, widget=forms.HiddenInput)
    matching_digest = forms.RegexField(regex=r"^[0-9a-f]{64}$", widget=forms.HiddenInput)


def filtered(params, user) -> tuple[ConflictFilter, QuerySet, str]:
    """The filter of ``params`` for ``user``, the conflicts it lists (of every state) and its state.
    A filter the form refuses (another workspace, an unknown state) lists nothing rather than more."""
    visible = roles.visible(Conflict.objects.all(), user, via="operation__workspace")
    filterset = ConflictFilter(params or None, queryset=visible)
    filterset.filters["workspace"].queryset = roles.workspaces(user)
    if not filterset.is_bound:
        return filterset, filterset.qs, ""
    if not filterset.is_valid():
        return filterset, visible.none(), ""
    return filterset, filterset.qs, filterset.form.cleaned_data.get("state") or ""


@console_page
def inbox(request):
    user = request.user
    filterset, conflicts, state = filtered(request.GET, user)
    older = row_id(request.GET.get("older"))
    # The decided tab lists no open conflict: it counts them, without reading them out.
    listed = state != DECIDED
    open_ = open_conflicts(conflicts) if listed else []
    counts = _counts(conflicts, open_ if listed else None)
    reader = _Reader(user)
    held_ids, more_held, groups = [], False, None
    if state in ("", HELD):
        held_ids, more_held = _newest([c.pk for c in open_ if c.held], older=older if state else None)
    if state in ("", DISMISS_ONLY):
        one_action = bool(filterset.is_valid() and filterset.form.cleaned_data.get("action"))
        groups = _groups([c for c in open_ if not c.held], request.GET, user, paged=one_action, older=older)
    loaded = reader.load(conflicts, held_ids + [pk for group in groups or [] for pk in group["ids"]])
    held = reader.rows(loaded, held_ids) if state in ("", HELD) else None
    dismissable = None if groups is None else [group | {"rows": reader.rows(loaded, group["ids"])} for group in groups]
    decided = reader.page(in_state(conflicts, DECIDED), older=older)[0] if state == DECIDED else None
    shown = [row for rows in (held or [], *(g["rows"] for g in dismissable or []), decided or []) for row in rows]
    seen = max((row["conflict"].pk for row in shown), default=0)
    older_link = _older_link(state, held, more_held, dismissable, decided)
    return render(
        request,
        "console/conflicts.html",
        {
            "nav": "conflicts",
            "filter": filterset,
            "state": state,
            "tabs": _tabs(counts, state),
            "counts": counts,
            "held": held,
            "more_held": more_held,
            "dismissable": dismissable,
            "decided": decided,
            "seen": seen,
            "older": older_link,
            "first": older is None,
            "query": request.GET.urlencode(),
            "can_select": any(row["can_dismiss"] for group in dismissable or [] for row in group["rows"]),
            "can_bulk": roles.workspace_ids(user, REVIEW) != set(),
            "selection_max": SELECTION_MAX,
        },
    )


def _counts(conflicts: QuerySet, open_: list[OpenConflict] | None) -> dict:
    """How many are held and dismiss-only (of the open ones read, or counted where none was read),
    and decided (up to a bound)."""
    if open_ is None:
        counted = conflicts.filter(status=Conflict.Status.OPEN).aggregate(
            held=Count("pk", filter=not_run()), n=Count("pk")
        )
        held, open_count = counted["held"], counted["n"]
    else:
        held, open_count = sum(conflict.held for conflict in open_), len(open_)
    decided = in_state(conflicts, DECIDED).order_by()[: DECIDED_COUNTED + 1].count()
    return {
        HELD: held,
        DISMISS_ONLY: open_count - held,
        DECIDED: min(decided, DECIDED_COUNTED),
        "decided_capped": decided > DECIDED_COUNTED,
        "open": open_count,
    }


def _newest(ids: list[int], *, older: int | None) -> tuple[list[int], bool]:
    """A page of ``ids`` (newest first) older than the cursor, and whether there are more."""
    found = [pk for pk in ids if older is None or pk < older][: PAGE_SIZE + 1]
    return found[:PAGE_SIZE], len(found) > PAGE_SIZE


def _groups(dismiss_only: list[OpenConflict], params, user, *, paged: bool, older: int | None) -> list[dict]:
    """The dismiss-only conflicts (newest first) grouped by action, biggest group first: each with its
    count, what "dismiss all N matching" sends, and the ids of its newest rows (a page of them where
    one action is listed, ``paged``)."""
    by_action: dict[str, list[OpenConflict]] = {}
    for conflict in dismiss_only:
        by_action.setdefault(conflict.action, []).append(conflict)
    reviewed = roles.workspace_ids(user, REVIEW)  # as ``_decidable_of`` narrows them
    groups = []
    for place, (action, ones) in enumerate(sorted(by_action.items(), key=lambda item: (-len(item[1]), item[0]))):
        if paged:
            ids, more_paged = _newest([c.pk for c in ones], older=older) if place == 0 else ([], False)
        else:
            ids, more_paged = [c.pk for c in ones[:ROWS_PER_ACTION]], False
        query = params.copy()
        query.setlist("state", [DISMISS_ONLY])
        query.setlist("action", [action])
        query.pop("older", None)
        decidable = sorted(c.pk for c in ones if reviewed is None or c.workspace_id in reviewed)
        groups.append(
            {
                "action": action,
                "count": len(ones),
                "ids": ids,
                "see_all": not paged and len(ones) > len(ids),
                "query": query.urlencode(),
                "matching": tables.ids_payload(decidable, query) if len(ones) <= SELECTION_MAX else None,
                "more_paged": more_paged,
            }
        )
    return groups


def _tabs(counts: dict, state: str) -> list[dict]:
    tabs = [{"state": "", "label": "Every open one", "count": counts["open"]}]
    tabs += [{"state": value, "label": label.split(":")[0], "count": counts[value]} for value, label in STATES]
    for tab in tabs:
        tab["current"] = tab["state"] == state
        tab["capped"] = tab["state"] == DECIDED and counts["decided_capped"]
    return tabs


def _older_link(state, held, more_held, dismissable, decided) -> int | None:
    """The keyset cursor of the next page, where the list shown is one paged list."""
    if state == HELD and more_held:
        return held[-1]["conflict"].pk
    if state == DECIDED and decided and len(decided) == PAGE_SIZE:
        return decided[-1]["conflict"].pk
    if state == DISMISS_ONLY and dismissable and len(dismissable) == 1 and dismissable[0]["more_paged"]:
        return dismissable[0]["rows"][-1]["conflict"].pk
    return None


class _Reader:
    """Reads the rows of a list and what the person may do to each, their workspace's deciders read
    once per workspace."""

    def __init__(self, user):
        self.user = user
        self.deciders: dict[int, list] = {}

    def page(self, conflicts: QuerySet, *, older: int | None) -> tuple[list[dict], bool]:
        if older is not None:
            conflicts = conflicts.filter(pk__lt=older)
        found = list(self._loaded(conflicts).order_by("-pk")[: PAGE_SIZE + 1])
        shown = found[:PAGE_SIZE]
        return self.rows({c.pk: c for c in shown}, [c.pk for c in shown]), len(found) > PAGE_SIZE

    def load(self, conflicts: QuerySet, ids: list[int]) -> dict[int, Conflict]:
        """The conflicts of ``ids`` among ``conflicts``, with what their rows show, in one query."""
        return {conflict.pk: conflict for conflict in self._loaded(conflicts.filter(pk__in=ids))} if ids else {}

    @staticmethod
    def _loaded(conflicts: QuerySet) -> QuerySet:
        return conflicts.select_related("operation__workspace", "operation__assigned_to", "delivery")

    def rows(self, loaded: dict[int, Conflict], ids: list[int]) -> list[dict]:
        """The rows of ``ids`` (in that order) of the conflicts ``loaded``."""
        conflicts = [loaded[pk] for pk in ids if pk in loaded]
        held = [c.operation_id for c in conflicts if holds.is_held(c.operation)]
        origins = holds.held_from(held) if held else {}
        return [self._row(conflict, origins) for conflict in conflicts]

    def _row(self, conflict: Conflict, origins: dict) -> dict:
        op = conflict.operation
        definition = definition_of(op.action)
        reveal = privacy.may_view_sensitive(self.user, op.workspace_id)
        is_open = conflict.status == Conflict.Status.OPEN
        takes_payload = is_open and definition is not None and conflict_decisions.may_apply(op, definition, origins)
        apply_refusal = conflict_refusal(self.user, conflict, applying=True) if takes_payload else ""
        can_dismiss = is_open and not conflict_refusal(self.user, conflict, applying=False)
        hidden = sensitive_differences(conflict) if takes_payload and not reveal else []
        return {
            "conflict": conflict,
            "operation": op,
            "differences": labels.difference_rows(
                privacy.masked_differences(conflict.differences, op.action, reveal=reveal),
                definition,
                recorded=privacy.masked(op.payload, op.action, reveal=reveal),
                incoming=privacy.masked(conflict.incoming_payload, op.action, reveal=reveal),
            ),
            "held": holds.is_held(op),
            "awaits_approval": origins.get(op.pk) == State.PENDING_APPROVAL or op.state == State.PENDING_APPROVAL,
            "can_apply": takes_payload and not apply_refusal,
            "can_dismiss": can_dismiss,
            # Who may apply it when this person may not for the values they cannot see.
            "hidden": hidden,
            "who": f"Only {deciders_of_sensitive()} see the {' and '.join(hidden)}" if hidden else "",
            "deciders": self._deciders(op) if hidden and can_dismiss else [],
            "may_assign": bool(hidden) and can_dismiss and may_take(self.user, op, open_conflict=is_open),
            "look_only": _look_only(conflict) if is_open and not can_dismiss else "",
        }

    def _deciders(self, op: Operation) -> list:
        """The active members who may apply a side of a sensitive conflict in the workspace (approvers,
        admins), at most ``NAMES_SHOWN`` + 1, read once per workspace."""
        if op.workspace_id not in self.deciders:
            granting = [r for r in roles.roles_granting(roles.VIEW_SENSITIVE) if roles.APPROVE in roles.GRANTS[r]]
            self.deciders[op.workspace_id] = list(
                get_user_model()
                .objects.filter(
                    is_active=True,
                    pk__in=Membership.objects.filter(workspace_id=op.workspace_id, role__in=granting).values("user_id"),
                )
                .order_by("username")[: NAMES_SHOWN + 1]
            )
        return self.deciders[op.workspace_id]


def _look_only(conflict: Conflict) -> str:
    """Who decides a conflict, for a person who may not."""
    reviewers = " and ".join(f"{role}s" for role in roles.roles_granting(REVIEW))
    said = f"You may look, not decide: {reviewers} of workspace {conflict.operation.workspace.slug} decide conflicts"
    sensitive = sensitive_differences(conflict)
    return said + (f", and {deciders_of_sensitive()} those in the {' and '.join(sensitive)}." if sensitive else ".")


def _decidable_of(conflicts: QuerySet, user) -> QuerySet:
    """Of ``conflicts``, those of the workspaces where ``user`` reviews: what "dismiss all N matching"
    counts and dismisses (a viewer elsewhere lists more than they may decide)."""
    return roles.visible(conflicts, user, via="operation__workspace", capability=REVIEW)


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
        done = decide(form.cleaned_data["reason"], form.cleaned_data.get("seen"))
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


def _decidable(request, conflicts) -> None:
    """403 unless the person may dismiss each of ``conflicts`` (``may.conflict_refusal``); applying a
    side they may not see is refused by the service, with its reason."""
    if any(conflict_refusal(request.user, conflict, applying=False) for conflict in conflicts):
        raise PermissionDenied


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
    _decidable(request, [conflict])

    def decide(reason, seen):
        still_open = conflict_decisions.open_ids([conflict.operation_id], seen=seen)
        rest = [other for other in still_open if other != conflict.pk]
        return conflict_decisions.apply_dismissing_the_rest(conflict, user=request.user, reason=reason, rest=rest)

    return _decide(request, DecideForm(request.POST), decide, field_id=f"conflict-{conflict.pk}-reason")


@console_action
def dismiss_selected(request):
    """Dismiss the conflicts ticked (or the one of a row's form), with one reason."""
    conflict_ids = _ids(request.POST.getlist("conflict"))
    if not conflict_ids:
        messages.error(request, "Select at least one conflict; nothing was changed.")
        return _back(request)
    if len(conflict_ids) > SELECTION_MAX:
        messages.error(request, f"Select at most {SELECTION_MAX} conflicts at once; nothing was changed.")
        return _back(request)
    named = list(
        roles.visible(
            Conflict.objects.filter(pk__in=conflict_ids), request.user, via="operation__workspace"
        ).select_related("operation__workspace")
    )
    if len(named) < len(conflict_ids):
        raise Http404("No such conflict in your workspaces.")
    _decidable(request, named)

    def decide(reason, seen):
        return conflict_decisions.dismiss_conflicts(conflict_ids, user=request.user, reason=reason)

    field_id = _field_id(request.POST.get("field", ""))
    return _decide(request, DecideForm(request.POST), decide, field_id=field_id)


def _field_id(text: str) -> str:
    """Where a refused reason is reported: a field of this page (``conflict-7-reason``,
    ``matching-2-reason``), else the selection's."""
    parts = text.split("-")
    if len(parts) == 3 and parts[0] in ("conflict", "matching") and parts[1].isdigit() and parts[2] == "reason":
        return text
    return "selection-reason"


@console_action
def dismiss_matching(request):
    """ "Dismiss all N matching": every conflict the list's query counts, if it counts exactly those
    the person saw (their number and digest); a list that changed since is refused, nothing done."""
    form = MatchingForm(request.POST)
    if not form.is_valid():
        messages.error(request, first_error(form))
        return _back(request)
    data = form.cleaned_data
    params = QueryDict(data["matching"])
    _, conflicts, state = filtered(params, request.user)
    if state != DISMISS_ONLY:
        raise Http404("Only dismiss-only conflicts are dismissed all at once.")
    ids, digest = tables.matching_ids(
        _decidable_of(in_state(conflicts, DISMISS_ONLY), request.user), limit=SELECTION_MAX
    )
    seen = data["matching_count"]
    if not ids:
        undecidable = in_state(conflicts, DISMISS_ONLY).select_related("operation__workspace").first()
        if undecidable is not None:  # open still, but the person's role there changed since
            messages.error(request, roles.refusal(request.user, REVIEW, undecidable.operation.workspace))
        else:
            messages.warning(request, f"None of these {seen:,} conflicts is open any more; nothing was changed.")
        return _back(request)
    if len(ids) != seen or digest != data["matching_digest"]:
        messages.error(
            request,
            f"The list changed since you loaded it: you saw {seen:,} conflicts, it now holds {len(ids):,}. "
            "Nothing was changed; look at the list again before dismissing all of it.",
        )
        return _back(request)
    try:
        done = conflict_decisions.dismiss_conflicts(ids, user=request.user, reason=data["reason"])
    except ReviewError as exc:
        report_refusal(request, exc, field_id=_field_id(request.POST.get("field", "")))
    else:
        _report(request, done)
    return _back(request)


def _ids(values: list[str]) -> set[int]:
    """The ids a form ticked; 404 for anything else (no form of ours sends it)."""
    ids = {row_id(value) for value in values}
    if None in ids:
        raise Http404("Not a conflict or operation id.")
    return ids
