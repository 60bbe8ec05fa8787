"""Approval as a work list: the operations awaiting an approver's decision, with their amounts, a
total per currency and the people behind each; "Approve selected" through one confirmation page that
repeats every selected operation's payload (amount, customer), who is behind it and its fingerprint,
with the total; then ``ledger.people.bulk_approvals`` approves each on its own (role, four eyes and
fingerprint checked per operation) and the person lands back on the list, the next items on top.

After a single decision (``confirm.approve``, ``decisions.reject``) the person lands on the next
operation awaiting their decision (``landing``), not on the one just decided.

Thin like every console view: the list and the confirmation read ``ledger.reads.awaiting_approval``;
one page is a fixed number of queries whatever it lists.
"""

import re
from collections import defaultdict

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from ledger.core import privacy, roles
from ledger.core.roles import APPROVE
from ledger.people import bulk_approvals, may
from ledger.people.approvals import ApprovalError
from ledger.reads import awaiting_approval, keyset
from opsconsole.console import labels, money
from opsconsole.console.forms import row_id
from opsconsole.console.views import console_action, console_page, definition_of

PAGE_SIZE = 100
# An item of the confirmation's form: the operation's id and the fingerprint the page showed.
ITEM = re.compile(r"^(?P<pk>[0-9]{1,18}):(?P<fingerprint>[0-9a-f]{64})$")


def landing(request, decided_key: str, verb: str):
    """Where a person goes after deciding ``decided_key``: the next operation awaiting their decision
    (oldest first), or the work list when none is left; the message says which."""
    following = awaiting_approval.next_for(request.user)
    if following is None:
        messages.success(request, f"{verb} {decided_key}. Nothing else awaits your approval.")
        return redirect("console:approvals")
    messages.success(request, f"{verb} {decided_key}. Next awaiting your approval: {following.key}.")
    return redirect("console:operation", pk=following.pk)


def _require_approver(user) -> None:
    if roles.workspace_ids(user, APPROVE) == set():
        raise PermissionDenied(
            f"{user.get_username()} may not approve or reject in any workspace: the work list of approvals "
            "is for approvers and admins."
        )


@console_page
@require_GET
def work_list(request):
    user = request.user
    _require_approver(user)
    queryset = awaiting_approval.awaiting(user)
    page = keyset.paginate(
        queryset.prefetch_related(awaiting_approval.people_behind()),
        request.GET,
        field="created_at",
        size=PAGE_SIZE,
        ascending=True,
    )
    totals = awaiting_approval.totals(queryset)
    return render(
        request,
        "console/approvals.html",
        {
            "nav": "approvals",
            "page": page,
            "rows": [_row(op, user) for op in page],
            "totals": _money_list(totals.by_currency),
            "counted": totals.counted,
            "capped": totals.capped,
        },
    )


@console_page
@require_GET
def confirm_selected(request):
    """The one confirmation of a selection (``?op=<id>&op=<id>…``): every operation as the approver
    will approve it, with its fingerprint, and the total. Reading it approves nothing."""
    user = request.user
    _require_approver(user)
    ids = _ids(request.GET.getlist("op"))
    if not ids:
        messages.error(request, "Select at least one operation to approve; nothing was approved.")
        return redirect("console:approvals")
    if len(ids) > bulk_approvals.SELECTION_MAX:
        messages.error(
            request, f"Select at most {bulk_approvals.SELECTION_MAX} operations at once; nothing was approved."
        )
        return redirect("console:approvals")
    operations = list(
        awaiting_approval.awaiting(user).filter(pk__in=ids).prefetch_related(awaiting_approval.people_behind())
    )
    gone = len(ids) - len(operations)
    if not operations:
        messages.error(request, "None of the selected operations awaits approval any more; nothing was approved.")
        return redirect("console:approvals")
    rows = [_row(op, user) for op in operations]
    approvable = [row for row in rows if not row["own_work"]]
    return render(
        request,
        "console/approve_selected.html",
        {
            "nav": "approvals",
            "rows": rows,
            "approvable": len(approvable),
            "refused": len(rows) - len(approvable),
            "gone": gone,
            "totals": _money_list(_sum([row["operation"] for row in approvable], user)),
            "form": NoteForm(),
        },
    )


class NoteForm(forms.Form):
    note = forms.CharField(label="Note", max_length=500, required=False, widget=forms.Textarea(attrs={"rows": 2}))


@console_action
def approve_selected(request):
    """Approve the confirmed selection: each ``item`` (``<id>:<fingerprint>``) on its own."""
    user = request.user
    _require_approver(user)
    form = NoteForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Note: at most 500 characters. Nothing was approved.")
        return redirect("console:approvals")
    items = [ITEM.match(item) for item in request.POST.getlist("item")]
    if not all(items):
        messages.error(request, "The selection was not understood (reload the confirmation); nothing was approved.")
        return redirect("console:approvals")
    try:
        outcomes = bulk_approvals.approve_selected(
            {int(item["pk"]): item["fingerprint"] for item in items}, user=user, note=form.cleaned_data["note"]
        )
    except ApprovalError as exc:
        messages.error(request, str(exc))
        return redirect("console:approvals")
    approved = [outcome.operation for outcome in outcomes if outcome.approved]
    if approved:
        total = ", ".join(_money_list(_sum(approved, user)))
        messages.success(
            request,
            f"Approved {len(approved)} of {len(outcomes)} operation{'s' if len(outcomes) != 1 else ''}"
            + (f" ({total})" if total else "")
            + ".",
        )
    for outcome in outcomes:
        if not outcome.approved:
            messages.error(request, f"Not approved: {outcome.message}")
    return redirect("console:approvals")


def _ids(values: list[str]) -> list[int]:
    return sorted({row for value in values if (row := row_id(value)) is not None})


def _row(operation, user) -> dict:
    """What the list and the confirmation show of one operation, masked as ``user`` may see it."""
    definition = definition_of(operation.action)
    shown = privacy.masked(
        operation.payload, operation.action, reveal=privacy.may_view_sensitive(user, operation.workspace_id)
    )
    money_fields = getattr(definition, "money_fields", None) or {}
    formatted = money.shown_payload(shown, definition)
    amounts = [formatted[name] for name in money_fields if isinstance(formatted, dict) and name in formatted]
    hidden = {*money_fields, *money_fields.values()}
    contributions = list(operation.contributions.all())  # prefetched
    return {
        "operation": operation,
        "amounts": amounts,
        # The rest of the payload, labelled: the customer, the request. A currency is in its amount.
        "details": labels.payload_rows({name: value for name, value in shown.items() if name not in hidden}, definition)
        if isinstance(shown, dict)
        else [],
        "contributions": contributions,
        "own_work": may.own_work(user, contributions),
    }


def _sum(operations, user) -> dict[str, int]:
    """The amounts of ``operations`` summed per currency (only those ``user`` may read)."""
    sums: dict[str, int] = defaultdict(int)
    for operation in operations:
        definition = definition_of(operation.action)
        if definition is None or not privacy.may_view_sensitive(user, operation.workspace_id):
            continue
        for amount, currency in definition.money_fields.items():
            value, code = operation.payload.get(amount), operation.payload.get(currency)
            if isinstance(value, int) and not isinstance(value, bool) and isinstance(code, str):
                sums[code] += value
    return dict(sorted(sums.items()))


def _money_list(by_currency: dict[str, int]) -> list[str]:
    return [money.format_money(total, code) or f"{total} {code}" for code, total in by_currency.items()]
