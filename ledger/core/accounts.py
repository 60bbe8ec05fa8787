"""Workspaces, their API tokens and the people who are members of them: creating, authenticating,
revoking, and offboarding (a person removed or deactivated loses their tokens in the same
transaction)."""

import json
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from difflib import get_close_matches
from functools import cache

from django.contrib.auth import get_user_model
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.template.defaultfilters import pluralize
from django.utils import timezone

from ledger.core import audit_chain
from ledger.core.rows import Selected, prepared_cursor
from ledger.core.transitions import record_audit_event
from ledger.models import ApiToken, AuditEvent, Membership, Role, Scope, Workspace
from ledger.models.core import MAX_AUDIT_LANES
from ledger.models.people import DEFAULT_SCOPES


class WorkspaceExists(Exception):
    pass


def create_workspace(
    *, slug: str, approved_owners: list[str], actor: str, retry_budget_per_hour: int | None = None, user=None
) -> tuple[Workspace, str]:
    """Create a workspace and its first API token (``user``'s, when given, who then becomes the
    workspace's admin; else a machine's); returns the token (shown once, stored hashed)."""
    workspace = Workspace(slug=slug, approved_owners=approved_owners)
    if retry_budget_per_hour is not None:
        workspace.retry_budget_per_hour = retry_budget_per_hour
    workspace.full_clean()
    try:
        with transaction.atomic():
            workspace.save()
            # The first event of the workspace's chain, keyed: a chain that appears since the last
            # exported heads must begin keyed (ledger.core.audit_verify).
            record_audit_event(actor=actor, kind="workspace_created", workspace=workspace, message=slug)
            if user is not None:
                set_membership(workspace=workspace, user=user, role=Role.ADMIN, actor=actor)
            token = issue_token(workspace=workspace, name="initial", actor=actor, user=user)
    except IntegrityError:
        raise WorkspaceExists(f"Workspace {slug!r} already exists.") from None
    return workspace, token


class BadScopes(ValueError):
    """Scopes a token cannot have: unknown names, none at all, or ``approve`` on a machine's token."""


def checked_scopes(scopes, *, person: bool) -> list[str]:
    """``scopes`` in their canonical order, or ``BadScopes`` saying what is wrong with them. Only
    people approve: a machine's token cannot be given ``approve`` (the API refuses it a decision
    whatever its scopes, and a scope it can never use would only mislead)."""
    wanted = set(scopes)
    unknown = sorted(wanted - set(Scope.values))
    if unknown:
        # A near miss (claim for claims) is named: what to type instead, not only the list.
        near = [match for name in unknown for match in get_close_matches(name, Scope.values, n=1)]
        meant = f" (did you mean {', '.join(near)}?)" if near else ""
        raise BadScopes(
            f"Unknown scope{pluralize(unknown)} {', '.join(map(repr, unknown))}{meant}; "
            f"the scopes are {', '.join(Scope.values)}."
        )
    if not wanted:
        raise BadScopes("A token needs at least one scope.")
    if Scope.APPROVE in wanted and not person:
        raise BadScopes("Only a person's token can have the approve scope: only people approve.")
    return [scope for scope in Scope.values if scope in wanted]


def issue_token(*, workspace: Workspace, name: str, actor: str, user=None, scopes=None) -> str:
    """A new token for ``workspace``; with ``user`` it is that person's (what it submits is theirs,
    so they cannot approve it), without one a machine's. ``scopes``: what it may be used for
    (default: events, claims and read, what every token could do before scopes). Returns the
    token, shown once."""
    scopes = checked_scopes(DEFAULT_SCOPES if scopes is None else scopes, person=user is not None)
    token = ApiToken.generate()
    with transaction.atomic():
        ApiToken.objects.create(
            workspace=workspace,
            name=name,
            token_hash=ApiToken.hash(token),
            hint=token[:8],
            user=user,
            scopes=scopes,
        )
        owner = f" for {user.get_username()}" if user is not None else ""
        record_audit_event(
            actor=actor,
            kind="token_issued",
            workspace=workspace,
            message=f"{name} {token[:8]}{owner} ({', '.join(scopes)})",
        )
    return token


def set_token_scopes(api_token: ApiToken, *, scopes, actor: str) -> bool:
    """Give the live ``api_token`` exactly ``scopes`` (``BadScopes`` when it cannot have them),
    audited as ``token_scopes_changed`` with the scopes before and after; returns whether anything
    changed. Takes effect at the token's next request (each request reads its token)."""
    scopes = checked_scopes(scopes, person=api_token.user_id is not None)
    with transaction.atomic():
        locked = ApiToken.objects.select_for_update().select_related("workspace").get(pk=api_token.pk)
        if locked.revoked_at is not None:
            raise TokenNotFound(f"Token {locked.hint} is revoked; its scopes no longer matter.")
        before = list(locked.scopes)
        if before == scopes:
            return False
        locked.scopes = scopes
        locked.save(update_fields=["scopes"])
        record_audit_event(
            actor=actor,
            kind="token_scopes_changed",
            workspace=locked.workspace,
            message=f"{locked.name} {locked.hint}: {', '.join(before)} -> {', '.join(scopes)}",
        )
    api_token.scopes = scopes
    return True


class BadAuditLanes(ValueError):
    """A lane count a workspace cannot have."""


def set_audit_lanes(workspace: Workspace, *, lanes: int, actor: str) -> bool:
    """Spread ``workspace``'s audit events over ``lanes`` chains (``Workspace.audit_lanes``;
    ``BadAuditLanes`` outside 1 to 64), audited as ``audit_lanes_changed``; returns whether anything
    changed. The next append reads the new count (``ledger_audit_head``). Safe at any time: each lane
    is a chain of its own, so an operation whose later events now go to another lane leaves every
    lane linked, and a lane no longer used keeps its events and its heads (verified and exported
    as long as it holds events)."""
    if not isinstance(lanes, int) or not 1 <= lanes <= MAX_AUDIT_LANES:
        raise BadAuditLanes(f"A workspace has 1 to {MAX_AUDIT_LANES} audit lanes, not {lanes!r}.")
    with transaction.atomic():
        locked = Workspace.objects.select_for_update().get(pk=workspace.pk)
        before = locked.audit_lanes
        if before == lanes:
            return False
        locked.audit_lanes = lanes
        locked.save(update_fields=["audit_lanes"])
        record_audit_event(
            actor=actor, kind="audit_lanes_changed", workspace=locked, message=f"audit lanes {before} -> {lanes}"
        )
    workspace.audit_lanes = lanes
    return True


def authenticate_token(token: str) -> ApiToken | None:
    """The live (not revoked) API token with this value, with its workspace and person, and the
    person's role in that workspace (``workspace_role``: None for a machine's token, or a superuser
    who is no member), so that what the role allows needs no query of its own (``roles.grants``).

    A person's token counts only while that person is active and a member of the token's workspace
    (a superuser: of every one). Offboarding revokes the tokens too (``remove_membership``,
    ``deactivate_person``), but the check is made here, at every use, so it holds however the person
    left: a membership row deleted or ``is_active`` cleared by code that revoked nothing. One
    statement: the token by its unique hash, its person by primary key, and the membership by
    (user, workspace), which ``membership_one_per_workspace`` indexes. Written in SQL, built once per
    process from the models: the ORM compiled the same joins again at every request, about 2 ms of
    CPU, two fifths of what a ``POST /api/v1/events`` cost its gunicorn worker (bench/profile_request.py).
    Prepared: PostgreSQL plans it once per connection, not at every request (``prepared_cursor``).

    What it found is kept for ``cached_token`` (the row and its digest, ``ledger_token_digest``).
    """
    token_hash = ApiToken.hash(token)
    statement = _token_statement()
    with prepared_cursor() as cursor:
        cursor.execute(statement.sql, [token_hash])
        row = cursor.fetchone()
    if row is None:
        _resolved.pop(token_hash, None)
        return None
    if len(_resolved) >= RESOLVED_LIMIT:
        _resolved.clear()
    _resolved[token_hash] = row
    return _token_of(statement, row, recheck=None)


def cached_token(token: str) -> ApiToken | None:
    """What ``authenticate_token`` last found for this token in this process (None if nothing), built
    anew, unchecked: its ``recheck`` (the token's hash and digest) must go to the statement that
    writes, ``ledger_token_unchanged``, which refuses it (``TokenChanged``) unless the token, its
    workspace, its person and their role are all still as they were read. Only a caller whose every
    write passes that check may act on it (the API's intake, ``opsconsole.api.tokens``); anything
    else it does must ask ``authenticate_token`` first."""
    token_hash = ApiToken.hash(token)
    row = _resolved.get(token_hash)
    if row is None:
        return None
    statement = _token_statement()
    return _token_of(statement, row, recheck={"hash": token_hash, "digest": row[statement.digest]})


def forget_token(token: str) -> None:
    """Drop what this process kept of the token (``TokenChanged`` said it is stale)."""
    _resolved.pop(ApiToken.hash(token), None)


class TokenChanged(Exception):
    """A write that checked a cached token (``cached_token``) found it changed since it was read
    (SQLSTATE ``TOKEN_CHANGED``, raised by ``ledger_token_unchanged``); it wrote nothing."""


def check_token(recheck: dict | None) -> None:
    """The check a write makes of a cached token (``ApiToken.recheck``; None: read just now, nothing
    to check), made alone, for a caller that is about to write or answer outside any statement
    that checks it: ``TokenChanged`` when the token changed."""
    if recheck is None:
        return
    # In a caller's transaction, a savepoint: the refusal is the caller's to handle, not its end.
    alone = transaction.atomic() if connection.in_atomic_block else nullcontext()
    with token_checked(), alone, connection.cursor() as cursor:
        cursor.execute("SELECT ledger_token_unchanged(%s::jsonb)", [json.dumps(recheck)])


@contextmanager
def token_checked():
    """Around a statement that checks a cached token: its refusal (``TOKEN_CHANGED``) raised as
    ``TokenChanged``."""
    try:
        yield
    except DatabaseError as exc:
        if token_changed(exc):
            raise TokenChanged from exc
        raise


# The SQLSTATE ledger_token_unchanged raises; and how many tokens a process keeps (emptied when full:
# a token then costs one lookup more).
TOKEN_CHANGED = "OC401"
RESOLVED_LIMIT = 1000
# Token hash -> the row of ``_token_statement`` it found.
_resolved: dict[str, tuple] = {}


def token_changed(exc: BaseException) -> bool:
    """Whether ``exc`` (a Django database error, or the driver's behind it) is ``TOKEN_CHANGED``."""
    return any(getattr(error, "sqlstate", None) == TOKEN_CHANGED for error in (exc, exc.__cause__))


def _token_of(statement: "_TokenStatement", row: tuple, *, recheck: dict | None) -> ApiToken:
    api_token = statement.token.instance(row)
    api_token.workspace = statement.workspace.instance(row)
    api_token.user = statement.user.instance(row)  # None: a machine's token
    api_token.workspace_role = row[statement.user.end]
    api_token.recheck = recheck
    return api_token


@dataclass(frozen=True)
class _TokenStatement:
    sql: str
    token: Selected
    workspace: Selected
    user: Selected

    @property
    def digest(self) -> int:
        return self.user.end + 1


@cache
def _token_statement() -> _TokenStatement:
    user_model = get_user_model()
    token = Selected(ApiToken, "t", 0)
    workspace = Selected(Workspace, "w", token.end)
    user = Selected(user_model, "u", workspace.end)
    sql = f"""
        SELECT {token.sql}, {workspace.sql}, {user.sql}, m.role, ledger_token_digest(t, w, u, m.role)
        FROM ledger_apitoken t
        JOIN ledger_workspace w ON w.id = t.workspace_id
        LEFT JOIN {connection.ops.quote_name(user_model._meta.db_table)} u ON u.id = t.user_id
        LEFT JOIN ledger_membership m ON m.user_id = t.user_id AND m.workspace_id = t.workspace_id
        WHERE t.token_hash = %s AND t.revoked_at IS NULL
          AND (t.user_id IS NULL OR (u.is_active AND (u.is_superuser OR m.id IS NOT NULL)))
    """
    return _TokenStatement(sql, token, workspace, user)


class TokenNotFound(Exception):
    pass


def live_token(*, workspace: Workspace, hint: str, doing: str, lock: bool = False) -> ApiToken:
    """The workspace's one live token whose hint (first characters) is ``hint`` (locked, with
    ``lock``), else ``TokenNotFound`` (none, or several, of which none is ``doing``)."""
    live = ApiToken.objects.filter(workspace=workspace, hint=hint, revoked_at__isnull=True)
    found = list((live.select_for_update(of=("self",)) if lock else live).select_related("user"))
    if len(found) != 1:
        raise TokenNotFound(
            f"No live token {hint!r} in workspace {workspace.slug}."
            if not found
            else f"{len(found)} live tokens share the hint {hint!r}; none was {doing}."
        )
    return found[0]


def revoke_token(*, workspace: Workspace, hint: str, actor: str) -> ApiToken:
    """Revoke the workspace's live token whose hint (first characters) is ``hint``; audited."""
    with transaction.atomic():
        api_token = live_token(workspace=workspace, hint=hint, doing="revoked", lock=True)
        api_token.revoked_at = timezone.now()
        api_token.save(update_fields=["revoked_at"])
        record_audit_event(
            actor=actor, kind="token_revoked", workspace=workspace, message=f"{api_token.name} {api_token.hint}"
        )
    return api_token


class NotAMember(Exception):
    pass


def set_membership(*, workspace: Workspace, user, role: str, actor: str) -> Membership:
    """Give ``user`` ``role`` in ``workspace`` (adding them, or changing their role), audited."""
    with transaction.atomic():
        membership, created = Membership.objects.select_for_update().get_or_create(
            workspace=workspace, user=user, defaults={"role": role}
        )
        before = membership.role
        if not created and before != role:
            membership.role = role
            membership.save(update_fields=["role"])
        if created or before != role:
            change = f"{user.get_username()}: {role}" if created else f"{user.get_username()}: {before} -> {role}"
            record_audit_event(
                actor=actor,
                kind="member_added" if created else "member_role_changed",
                workspace=workspace,
                message=change,
            )
    return membership


def remove_membership(*, workspace: Workspace, user, actor: str) -> int:
    """Take ``user`` out of ``workspace`` and revoke their API tokens of it, in one transaction,
    audited (``member_removed``, and ``token_revoked`` per token). Returns how many were revoked."""
    with transaction.atomic():
        deleted, _ = Membership.objects.filter(workspace=workspace, user=user).delete()
        if not deleted:
            raise NotAMember(f"{user.get_username()} is not a member of workspace {workspace.slug}.")
        events = _revoke_tokens_of(
            user,
            workspace=workspace,
            actor=actor,
            why=f"{user.get_username()} is no longer a member of {workspace.slug}",
        )
        audit_chain.append(
            [
                *events,
                AuditEvent(
                    actor=actor,
                    kind="member_removed",
                    workspace_id=workspace.pk,
                    message=f"{user.get_username()} ({tokens_revoked(len(events))})",
                ),
            ]
        )
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
        audit_chain.append(
            [
                *events,
                AuditEvent(
                    actor=actor,
                    kind="person_deactivated",
                    message=f"{user.get_username()} ({tokens_revoked(len(events))})",
                ),
            ]
        )
    return len(events)


def tokens_revoked(count: int) -> str:
    return f"{count} API token{'' if count == 1 else 's'} revoked"


def _revoke_tokens_of(user, *, actor: str, why: str, workspace: Workspace | None = None) -> list[AuditEvent]:
    """Revoke ``user``'s live tokens (of ``workspace``, or of every one); returns their audit
    events, one per token, for the caller to append with its own in one call (``audit_chain.append``
    takes the chains' locks in one order, after these row locks)."""
    live = (
        ApiToken.objects.select_for_update(of=("self",))
        .select_related("workspace")
        .filter(user=user, revoked_at__isnull=True)
    )
    if workspace is not None:
        live = live.filter(workspace=workspace)
    found = list(live.order_by("id"))
    ApiToken.objects.filter(pk__in=[api_token.pk for api_token in found]).update(revoked_at=timezone.now())
    return [
        AuditEvent(
            actor=actor,
            kind="token_revoked",
            workspace_id=api_token.workspace_id,
            message=f"{api_token.name} {api_token.hint}: {why}",
        )
        for api_token in found
    ]
