"""Taking an operation in the console, and giving it back (``ledger.people.assignment``): from the
queue's row or the operation's page, back to where the person was."""

from django.contrib import messages
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme

from ledger.people.assignment import AssignmentError, release_operation, take_operation
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
