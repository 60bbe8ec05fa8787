"""The writes of the ledger that are not intake or processing: state transitions, audit events,
workspaces and tokens, pause switches. Views, commands, admin actions and tasks call these."""

import logging

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from ledger.models import ApiToken, AuditEvent, Control, Operation, Workspace
from ledger.states import State, can_transition

logger = logging.getLogger("ledger")

class WorkspaceExists(Exception):
    pass


class IllegalTransition(Exception):
    pass


class NotPaused(Exception):
    pass


def record_audit_event(*, actor: str, kind: str, operation: Operation | None = None,
                       workspace: Workspace | None = None, from_state: str = "", to_state: str = "",
                       error_category: str = "", message: str = "", attempt=None) -> AuditEvent:
    """Append one audit event. Callers run it in the transaction of the change it describes."""
    return AuditEvent.objects.create(
        operation=operation,
        workspace_id=workspace.pk if workspace else (operation.workspace_id if operation else None),
        actor=actor,
        kind=kind,
        from_state=from_state,
        to_state=to_state,
        error_category=error_category,
        message=message[:500],
        attempt=attempt,
    )


def transition_operation(operation: Operation, *, to_state: State, actor: str, kind: str,
                         fencing_token: int | None = None, also_requires: dict | None = None,
                         message: str = "", error_category: str = "", attempt=None, **fields) -> bool:
    """Move ``operation`` from its current state (as loaded) to ``to_state``, with an audit event.

    A guarded UPDATE (``WHERE id = .. AND state = <loaded state>`` and, when given, ``AND
    fencing_token = ..`` and the ``also_requires`` columns) makes the move a compare-and-set: it
    returns False and changes nothing when another process moved the row first. The row and its
    audit event commit together: in the caller's transaction when there is one, else in a
    transaction of their own.
    """
    from_state = operation.state
    if not can_transition(from_state, to_state):
        raise IllegalTransition(f"{from_state} -> {to_state} is not a transition of the state machine.")
    guard = Q(pk=operation.pk, state=from_state)
    if fencing_token is not None:
        guard &= Q(fencing_token=fencing_token)
    if also_requires:
        guard &= Q(**also_requires)
    now = timezone.now()
    # No savepoint: inside a caller's transaction a failure here fails the whole transaction
    # anyway, and a savepoint would cost two round trips per transition.
    with transaction.atomic(savepoint=False):
        changed = Operation.objects.filter(guard).update(state=to_state, updated_at=now, **fields)
        if not changed:
            return False
        record_audit_event(
            actor=actor, kind=kind, operation=operation, from_state=from_state, to_state=to_state,
            error_category=error_category, message=message, attempt=attempt,
        )
    for name, value in fields.items():
        if not isinstance(value, F):
            setattr(operation, name, value)
    operation.state = to_state
    operation.updated_at = now
    logger.info("transition", extra={"key": operation.key, "from": from_state, "to": str(to_state),
                                     "kind": kind, "error_category": error_category})
    return True


# --- workspaces and tokens ---------------------------------------------------------------------

def create_workspace(*, slug: str, approved_owners: list[str], actor: str,
                     retry_budget_per_hour: int | None = None) -> tuple[Workspace, str]:
    """Create a workspace and its first API token; returns the token (shown once, stored hashed)."""
    workspace = Workspace(slug=slug, approved_owners=approved_owners)
    if retry_budget_per_hour is not None:
        workspace.retry_budget_per_hour = retry_budget_per_hour
    workspace.full_clean()
    try:
        with transaction.atomic():
            workspace.save()
            token = issue_token(workspace=workspace, name="initial", actor=actor)
    except IntegrityError:
        raise WorkspaceExists(f"Workspace {slug!r} already exists.") from None
    return workspace, token


def issue_token(*, workspace: Workspace, name: str, actor: str) -> str:
    token = ApiToken.generate()
    with transaction.atomic():
        ApiToken.objects.create(
            workspace=workspace, name=name, token_hash=ApiToken.hash(token), hint=token[:8]
        )
        record_audit_event(actor=actor, kind="token_issued", workspace=workspace, message=f"{name} {token[:8]}")
    return token


def authenticate_token(token: str) -> ApiToken | None:
    """The live (not revoked) API token with this value, with its workspace."""
    return (
        ApiToken.objects.select_related("workspace")
        .filter(token_hash=ApiToken.hash(token), revoked_at__isnull=True)
        .first()
    )


class TokenNotFound(Exception):
    pass


def revoke_token(*, workspace: Workspace, hint: str, actor: str) -> ApiToken:
    """Revoke the workspace's live token whose hint (first characters) is ``hint``; audited."""
    with transaction.atomic():
        found = list(ApiToken.objects.select_for_update().filter(
            workspace=workspace, hint=hint, revoked_at__isnull=True
        ))
        if len(found) != 1:
            raise TokenNotFound(
                f"No live token {hint!r} in workspace {workspace.slug}." if not found
                else f"{len(found)} live tokens share the hint {hint!r}; none was revoked."
            )
        api_token = found[0]
        api_token.revoked_at = timezone.now()
        api_token.save(update_fields=["revoked_at"])
        record_audit_event(actor=actor, kind="token_revoked", workspace=workspace,
                           message=f"{api_token.name} {api_token.hint}")
    return api_token


# --- pause and resume --------------------------------------------------------------------------

def set_paused(*, paused: bool, actor: str, reason: str = "", workspace: Workspace | None = None,
               action: str = "") -> Control:
    """Pull or release one pause switch (global, a workspace, an action, or both), audited.

    Paused operations keep their state; workers simply do not claim them. Releasing a switch
    nudges the workers on commit so the held operations drain. Releasing a switch that is not
    pulled raises NotPaused (a mistyped scope must not look like a successful resume).
    """
    with transaction.atomic():
        if paused:
            control, _ = Control.objects.select_for_update().get_or_create(workspace=workspace, action=action)
        else:
            control = Control.objects.select_for_update().filter(
                workspace=workspace, action=action, paused=True
            ).first()
            if control is None:
                scope = Control(workspace=workspace, action=action).scope_label
                raise NotPaused(f"Nothing to resume: {scope} is not paused.")
        control.paused = paused
        control.reason = reason
        control.changed_by = actor
        control.save()
        record_audit_event(
            actor=actor, kind="paused" if paused else "resumed", workspace=workspace,
            message=f"{control.scope_label}: {reason}" if reason else control.scope_label,
        )
        if not paused:
            from ledger import tasks

            transaction.on_commit(tasks.enqueue_drain)
    return control


def paused_filter() -> Q | None:
    """A filter matching the operations that the active pause switches hold.

    Returns None when nothing is paused. A global pause matches everything.
    """
    held = None
    for workspace_id, action in Control.objects.filter(paused=True).values_list("workspace_id", "action"):
        if workspace_id is None and not action:
            return Q(pk__isnull=False)  # the global switch holds everything
        scope = Q(workspace_id=workspace_id) if workspace_id is not None else Q(action=action)
        if workspace_id is not None and action:
            scope &= Q(action=action)
        held = scope if held is None else held | scope
    return held
