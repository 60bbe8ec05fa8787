"""The writes of the ledger that are not intake or processing: state transitions, audit events,
workspaces and tokens, pause switches. Views, commands, admin actions and tasks call these."""

import logging

from django.db import IntegrityError, transaction
from django.db.models import F, FilteredRelation, Q
from django.utils import timezone

from ledger import audit, configuration, nudges, tallies
from ledger.actions import registry
from ledger.models import ApiToken, AuditEvent, Control, Membership, Operation, Role, Workspace
from ledger.selectors import due_operations, scope_filter
from ledger.states import CLAIMABLE_STATES, TERMINAL_STATES, State, can_transition

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
    """Append one audit event to its workspace's chain. Callers run it in the transaction of the
    change it describes."""
    [event] = audit.append([AuditEvent(
        operation=operation,
        workspace_id=workspace.pk if workspace else (operation.workspace_id if operation else None),
        actor=actor,
        kind=kind,
        from_state=from_state,
        to_state=to_state,
        error_category=error_category,
        message=message[:500],
        attempt=attempt,
    )])
    return event


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
    # Lock order (docs/architecture.md): the row, then the tallies, then the audit chain. A caller
    # that moves several operations in one transaction uses transition_operations instead.
    with transaction.atomic(savepoint=False):
        changed = Operation.objects.filter(guard).update(state=to_state, updated_at=now, **fields)
        if not changed:
            return False
        if to_state in TERMINAL_STATES:
            tallies.count_finished([operation], now)
        record_audit_event(
            actor=actor, kind=kind, operation=operation, from_state=from_state, to_state=to_state,
            error_category=error_category, message=message, attempt=attempt,
        )
    for name, value in fields.items():
        if not isinstance(value, F):
            setattr(operation, name, value)
    operation.state = to_state
    operation.updated_at = now
    log_transition(operation, from_state=from_state, to_state=to_state, kind=kind, error_category=error_category,
                   attempt=attempt)
    return True


def transition_operations(operations: list[Operation], *, to_state: State, actor: str, kind: str,
                          message: str = "", **fields) -> list[Operation]:
    """Move each of ``operations`` from its state (as loaded) to ``to_state`` in one transaction
    (the caller's, if any), each by the guarded UPDATE of ``transition_operation``; returns those
    that moved. In the lock order (docs/architecture.md): every row first (callers lock them
    beforehand, in id order, when others may hold them), then the tallies, then one append of all
    their audit events, the workspace's chain last. One ``transition_operation`` after another
    would take a row after the chain."""
    for operation in operations:
        if not can_transition(operation.state, to_state):
            raise IllegalTransition(f"{operation.state} -> {to_state} is not a transition of the state machine.")
    now = timezone.now()
    moved = []
    with transaction.atomic(savepoint=False):
        for operation in operations:
            if Operation.objects.filter(pk=operation.pk, state=operation.state).update(
                    state=to_state, updated_at=now, **fields):
                moved.append((operation, operation.state))
        if to_state in TERMINAL_STATES:
            tallies.count_finished([operation for operation, _ in moved], now)
        audit.append([AuditEvent(operation=operation, workspace_id=operation.workspace_id, actor=actor, kind=kind,
                                 from_state=from_state, to_state=to_state, message=message[:500])
                      for operation, from_state in moved])
    for operation, from_state in moved:
        for name, value in fields.items():
            if not isinstance(value, F):
                setattr(operation, name, value)
        operation.state, operation.updated_at = to_state, now
        log_transition(operation, from_state=from_state, to_state=to_state, kind=kind)
    return [operation for operation, _ in moved]


def log_transition(operation: Operation, *, from_state: str, to_state: str, kind: str, error_category: str = "",
                   attempt=None, config_version: str | None = None) -> None:
    """The log line of a state change: identifiers and states, never payload text. The
    configuration is the one the attempt ran under (``config_version``, or the attempt's), or else
    the one the operation would run under now (``ledger.configuration``), by its digest's first 12
    characters."""
    config = config_version or (attempt.config_version_id if attempt is not None else None) or \
        configuration.current_digest(operation)
    logger.info("transition", extra={
        "key": operation.key, "from": str(from_state), "to": str(to_state), "kind": kind,
        "error_category": error_category, "attempts": operation.attempts,
        "correlation_id": operation.correlation_id, "config_version": (config or "")[:12]})


# --- workspaces and tokens ---------------------------------------------------------------------

def create_workspace(*, slug: str, approved_owners: list[str], actor: str,
                     retry_budget_per_hour: int | None = None, user=None) -> tuple[Workspace, str]:
    """Create a workspace and its first API token (``user``'s, when given, who then becomes the
    workspace's admin; else a machine's); returns the token (shown once, stored hashed)."""
    workspace = Workspace(slug=slug, approved_owners=approved_owners)
    if retry_budget_per_hour is not None:
        workspace.retry_budget_per_hour = retry_budget_per_hour
    workspace.full_clean()
    try:
        with transaction.atomic():
            workspace.save()
            if user is not None:
                set_membership(workspace=workspace, user=user, role=Role.ADMIN, actor=actor)
            token = issue_token(workspace=workspace, name="initial", actor=actor, user=user)
    except IntegrityError:
        raise WorkspaceExists(f"Workspace {slug!r} already exists.") from None
    return workspace, token


def issue_token(*, workspace: Workspace, name: str, actor: str, user=None) -> str:
    """A new token for ``workspace``; with ``user`` it is that person's (what it submits is theirs,
    so they cannot approve it), without one a machine's. Returns the token, shown once."""
    token = ApiToken.generate()
    with transaction.atomic():
        ApiToken.objects.create(
            workspace=workspace, name=name, token_hash=ApiToken.hash(token), hint=token[:8], user=user,
        )
        owner = f" for {user.get_username()}" if user is not None else ""
        record_audit_event(actor=actor, kind="token_issued", workspace=workspace,
                           message=f"{name} {token[:8]}{owner}")
    return token


def authenticate_token(token: str) -> ApiToken | None:
    """The live (not revoked) API token with this value, with its workspace and person.

    A person's token counts only while that person is active and a member of the token's workspace
    (a superuser: of every one). Offboarding revokes the tokens too (``remove_membership``,
    ``deactivate_person``), but the check is made here, at every use, so it holds however the person
    left: a membership row deleted or ``is_active`` cleared by code that revoked nothing. One
    statement: the token by its unique hash, its person by primary key, and the membership by
    (user, workspace), which ``membership_one_per_workspace`` indexes.
    """
    person_may_use = Q(user__is_active=True) & (Q(user__is_superuser=True) | Q(membership__isnull=False))
    return (
        ApiToken.objects.select_related("workspace", "user")
        .annotate(membership=FilteredRelation(
            "user__memberships", condition=Q(user__memberships__workspace=F("workspace"))))
        .filter(Q(user__isnull=True) | person_may_use, token_hash=ApiToken.hash(token), revoked_at__isnull=True)
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


# --- members ------------------------------------------------------------------------------------

class NotAMember(Exception):
    pass


def set_membership(*, workspace: Workspace, user, role: str, actor: str) -> Membership:
    """Give ``user`` ``role`` in ``workspace`` (adding them, or changing their role), audited."""
    with transaction.atomic():
        membership, created = Membership.objects.select_for_update().get_or_create(
            workspace=workspace, user=user, defaults={"role": role})
        before = membership.role
        if not created and before != role:
            membership.role = role
            membership.save(update_fields=["role"])
        if created or before != role:
            change = f"{user.get_username()}: {role}" if created else f"{user.get_username()}: {before} -> {role}"
            record_audit_event(actor=actor, kind="member_added" if created else "member_role_changed",
                               workspace=workspace, message=change)
    return membership


def remove_membership(*, workspace: Workspace, user, actor: str) -> int:
    """Take ``user`` out of ``workspace`` and revoke their API tokens of it, in one transaction,
    audited (``member_removed``, and ``token_revoked`` per token). Returns how many were revoked."""
    with transaction.atomic():
        deleted, _ = Membership.objects.filter(workspace=workspace, user=user).delete()
        if not deleted:
            raise NotAMember(f"{user.get_username()} is not a member of workspace {workspace.slug}.")
        events = _revoke_tokens_of(user, workspace=workspace, actor=actor,
                                   why=f"{user.get_username()} is no longer a member of {workspace.slug}")
        audit.append([*events, AuditEvent(actor=actor, kind="member_removed", workspace_id=workspace.pk,
                                          message=f"{user.get_username()} ({tokens_revoked(len(events))})")])
    return len(events)


def deactivate_person(user, *, actor: str) -> int:
    """Deactivate ``user`` (no more logins) and revoke every API token of theirs, in one
    transaction, audited (``person_deactivated``, a global event, and ``token_revoked`` in each
    token's workspace). Returns how many tokens were revoked. The one place a person is turned
    off: the admin (its change form and its action) and ``manage.py member deactivate`` call it.
    Safe to call for someone already inactive: it revokes what is left.
    """
    with transaction.atomic():
        type(user).objects.filter(pk=user.pk).update(is_active=False)
        user.is_active = False
        events = _revoke_tokens_of(user, actor=actor, why=f"{user.get_username()} was deactivated")
        audit.append([*events, AuditEvent(actor=actor, kind="person_deactivated",
                                          message=f"{user.get_username()} ({tokens_revoked(len(events))})")])
    return len(events)


def tokens_revoked(count: int) -> str:
    return f"{count} API token{'' if count == 1 else 's'} revoked"


def _revoke_tokens_of(user, *, actor: str, why: str, workspace: Workspace | None = None) -> list[AuditEvent]:
    """Revoke ``user``'s live tokens (of ``workspace``, or of every one); returns their audit
    events, one per token, for the caller to append with its own in one call (``audit.append``
    takes the chains' locks in one order, after these row locks)."""
    live = ApiToken.objects.select_for_update(of=("self",)).select_related("workspace").filter(
        user=user, revoked_at__isnull=True)
    if workspace is not None:
        live = live.filter(workspace=workspace)
    found = list(live.order_by("id"))
    ApiToken.objects.filter(pk__in=[api_token.pk for api_token in found]).update(revoked_at=timezone.now())
    return [AuditEvent(actor=actor, kind="token_revoked", workspace_id=api_token.workspace_id,
                       message=f"{api_token.name} {api_token.hint}: {why}") for api_token in found]


# --- pause and resume --------------------------------------------------------------------------

def set_paused(*, paused: bool, actor: str, reason: str = "", workspace: Workspace | None = None,
               action: str = "") -> Control:
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
            control = Control.objects.select_for_update().filter(
                workspace=workspace, action=action, paused=True
            ).first()
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
            actor=actor, kind="paused" if paused else "resumed", workspace=workspace,
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
        state__in=CLAIMABLE_STATES, deadline__gt=control.paused_since,
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
            deadline=F("deadline") + held_for, updated_at=now)
    return credited


def _drain_due_backlog() -> None:
    nudges.enqueue_drain(nudges.nudges_for(due_operations().count()))
