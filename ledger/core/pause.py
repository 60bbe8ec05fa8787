"""Pause switches: holding an action, a workspace or everything, and resuming (held time is credited
to each held operation's deadline)."""

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ledger.actions import registry
from ledger.core import nudges
from ledger.core.selectors import due_operations, scope_filter
from ledger.core.transitions import record_audit_event
from ledger.models import Control, Operation, Workspace
from ledger.states import CLAIMABLE_STATES


class NotPaused(Exception):
    pass


def set_paused(
    *, paused: bool, actor: str, reason: str = "", workspace: Workspace | None = None, action: str = ""
) -> Control:
    """Pull or release one pause switch (global, a workspace, an action, or both), audited.

    Paused operations keep their state; workers simply do not claim them, and their processing
    deadline does not run while they wait: releasing a switch gives the operations it held the
    time it held them (``_credit_held_time``) and nudges the workers on commit so they drain.
    Releasing a switch that is not pulled raises NotPaused (a mistyped scope must not look like a
    successful resume).
    """
    now = timezone.now()
    message = ""
    with transaction.atomic():
        if paused:
            control, _ = Control.objects.select_for_update().get_or_create(workspace=workspace, action=action)
            if not control.paused:
                control.paused_since = now
        else:
            control = (
                Control.objects.select_for_update().filter(workspace=workspace, action=action, paused=True).first()
            )
            if control is None:
                scope = Control(workspace=workspace, action=action).scope_label
                raise NotPaused(f"Nothing to resume: {scope} is not paused.")
            credited = _credit_held_time(control, now)
            message = f"; {credited} held operation(s) keep the time they waited" if credited else ""
        control.paused = paused
        control.reason = reason
        control.changed_by = actor
        control.save()
        record_audit_event(
            actor=actor,
            kind="paused" if paused else "resumed",
            workspace=workspace,
            message=(f"{control.scope_label}: {reason}" if reason else control.scope_label) + message,
        )
        if not paused:
            transaction.on_commit(_drain_due_backlog)
    return control


def _credit_held_time(control: Control, now) -> int:
    """Add the time ``control`` was pulled to the processing deadlines of the work it held.

    Each pending or retrying operation in its scope whose deadline had not passed when the switch
    was pulled gets ``now - paused_since`` more, but never more than a full fresh deadline from
    now. So one that arrived during the pause gets exactly its own deadline from now, and one held
    by overlapping switches, credited by each as it is released, is never credited less than it
    waited. Two UPDATEs per action, each comparing with constants; returns the rows credited.
    """
    if control.paused_since is None:
        return 0
    held_for = now - control.paused_since
    held = Operation.objects.filter(
        scope_filter(control.workspace_id, control.action),
        state__in=CLAIMABLE_STATES,
        deadline__gt=control.paused_since,
    )
    credited = 0
    for definition in registry.values():
        if control.action and definition.name != control.action:
            continue
        cap = now + definition.deadline
        of_action = held.filter(action=definition.name)
        # Capped first: the rows the second UPDATE moves can then no longer match the first.
        credited += of_action.filter(deadline__gt=cap - held_for).update(deadline=cap, updated_at=now)
        credited += of_action.filter(deadline__lte=cap - held_for).update(
            deadline=F("deadline") + held_for, updated_at=now
        )
    return credited


def _drain_due_backlog() -> None:
    nudges.enqueue_drain(nudges.nudges_for(due_operations().count()))
