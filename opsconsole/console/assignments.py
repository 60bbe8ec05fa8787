"""Taking an operation in the console, handing it to someone, and giving it back
(``ledger.people.assignment``): from the queue's row, the operation's page or the conflicts inbox,
back to where the person was."""

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme

from ledger.models import Membership
from ledger.people.assignment import AssignmentError, assign_operation, release_operation, take_operation
from opsconsole.console.forms import row_id
from opsconsole.console.views import console_action, operation_for


def _back(request, op):
    """Where the form came from (``next``: a page of this site), else the operation's page."""
    wanted = request.POST.get("next", "")
    if wanted and url_has_allowed_host_and_scheme(wanted, allowed_hosts={request.get_host()}):
        return redirect(wanted)
    return redirect(reverse("console:operation", args=[op.pk]))


@console_action
def take(request, pk):
    op = operation_for(request, pk)
    try:
        changed = take_operation(op, user=request.user, take_over=request.POST.get("take_over") == "on")
    except AssignmentError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"You took {op.key}." if changed else f"You had taken {op.key} already.")
    return _back(request, op)


@console_action
def release(request, pk):
    op = operation_for(request, pk)
    if release_operation(op, user=request.user):
        messages.success(request, f"You gave {op.key} back.")
    else:
        messages.info(request, f"You had not taken {op.key}; nothing changed.")
    return _back(request, op)


@console_action
def assign(request, pk):
    """Hand the operation to the person chosen (``to``: a user id the form listed)."""
    op = operation_for(request, pk)
    # Only a member of the operation's workspace: any other id is no one, so that a refusal never
    # spells the name of another tenant's user.
    members = Membership.objects.filter(workspace_id=op.workspace_id).values("user_id")
    to = (
        get_user_model()
        .objects.filter(pk=row_id(request.POST.get("to"), bits=31), is_active=True, pk__in=members)
        .first()
    )
    if to is None:
        messages.error(request, "Choose whom to assign it to; nothing was changed.")
        return _back(request, op)
    try:
        changed = assign_operation(op, user=request.user, to=to)
    except AssignmentError as exc:
        messages.error(request, str(exc))
    else:
        name = to.get_username()
        messages.success(request, f"Assigned {op.key} to {name}." if changed else f"{name} holds {op.key} already.")
    return _back(request, op)
