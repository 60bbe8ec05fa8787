"""Pause switches: holding an action, a workspace or everything, and resuming (the time held is kept,
and given to each held operation's deadline when it is claimed: ``ledger.core.held_time``)."""

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from ledger.core import announcements, held_time, nudges
from ledger.core.selectors import due_operations, scope_filter
from ledger.core.transitions import record_audit_event
from ledger.models import Control, Workspace
from ledger.timed import duration_text


class NotPaused(Exception):
    pass


def set_paused(
    *, paused: bool, actor: str, reason: str = "", workspace: Workspace | None = None, action: str = ""
) -> Control:
    """Pull or release one pause switch (global, a workspace, an action, or both), audited.

    Paused operations keep their state; workers simply do not claim them, and their processing
    deadline does not run while they wait: releasing a switch keeps the time it held them
    (``held_time.keep_interval``: one row, whatever it held; each operation is given that time
    when it is claimed) and nudges the workers on commit so they drain.
    Releasing a switch that is not pulled raises NotPaused (a mistyped scope must not look like a
    successful resume).
    """
    now = timezone.now()
    held = ""
    with transaction.atomic():
        if paused:
            control, _ = Control.objects.select_for_update().get_or_create(workspace=workspace, action=action)
            if not control.paused:
                control.paused_since = now
        else:
            found = Control.objects.select_for_update().filter(workspace=workspace, action=action, paused=True).first()
            if found is None:
                scope = Control(workspace=workspace, action=action).scope_label
                raise NotPaused(f"Nothing to resume: {scope} is not paused.")
            control = found
            held_for = held_time.keep_interval(control, now)
            # Whole seconds: the work it held keeps that time (given at each one's claim).
            held = f", held {duration_text(held_for)}" if held_for >= timedelta(seconds=1) else ""
            control.paused_since = None
        control.paused = paused
        control.reason = reason
        control.changed_by = actor
        control.save()
        event = record_audit_event(
            actor=actor,
            kind="paused" if paused else "resumed",
            workspace=workspace,
            message=control.scope_label + held + (f": {reason}" if reason else ""),
        )
        if not paused:
            announcements.announce_released(scope_filter(control.workspace_id, control.action), event)
            transaction.on_commit(_drain_due_backlog)
    return control


def _drain_due_backlog() -> None:
    nudges.enqueue_drain(nudges.nudges_for(due_operations()[: nudges.due_worth_counting()].count()))
