"""Who may do what where: a person's role in each workspace grants capabilities there.

| role | view | review (replay, resolve, cancel, conflicts) | approve | pause | view sensitive | erase | configure |
| ---- | ---- | ------------------------------------------- | ------- | ----- | -------------- | ----- | --------- |
| viewer | yes | | | | | | |
| operator | yes | yes | | yes | | | |
| approver | yes | | yes | | yes | | |
| admin | yes | yes | yes | yes | yes | yes | yes |

View sensitive: the values of an action's ``sensitive_fields`` unmasked (``ledger.core.privacy``); an
approver needs them to judge what they sign off. Erase: redact one data subject's values
(``manage.py erase``). Configure: edit the workspace's sources of signed webhooks in the admin
(destinations and HTTP actions serve every workspace: a superuser's).

A superuser holds every capability everywhere, and alone may pull switches that reach beyond a
workspace (global, or an action in every workspace). Nobody else sees another workspace at all:
views answer 404 for it, as if it did not exist.
"""

from dataclasses import dataclass

from django.db.models import Q, QuerySet

from ledger.models import Membership, Role, Workspace

VIEW, REVIEW, APPROVE, PAUSE = "view", "review", "approve", "pause"
VIEW_SENSITIVE, ERASE, CONFIGURE = "view_sensitive", "erase", "configure"

GRANTS: dict[str, frozenset[str]] = {
    Role.VIEWER: frozenset({VIEW}),
    Role.OPERATOR: frozenset({VIEW, REVIEW, PAUSE}),
    Role.APPROVER: frozenset({VIEW, APPROVE, VIEW_SENSITIVE}),
    Role.ADMIN: frozenset({VIEW, REVIEW, APPROVE, PAUSE, VIEW_SENSITIVE, ERASE, CONFIGURE}),
}

DESCRIBE = {
    VIEW: "see",
    REVIEW: "replay, resolve, cancel or decide conflicts",
    APPROVE: "approve or reject",
    PAUSE: "pause or resume",
    VIEW_SENSITIVE: "see sensitive values",
    ERASE: "erase personal data",
    CONFIGURE: "configure integrations",
}


def roles_granting(capability: str) -> list[str]:
    return [role for role, capabilities in GRANTS.items() if capability in capabilities]


@dataclass(frozen=True)
class Machine:
    """A machine's API token acting in its workspace (``opsconsole.api``), where the services take a
    person: no one, so the audit trail names the token (``token:<hint>``), it is nobody's work for
    four eyes, and it holds the ``role`` its scopes grant it in its workspace alone. Only the viewer
    and operator roles are given: a machine never approves, and sees no sensitive value."""

    workspace_id: int
    label: str
    role: str = Role.VIEWER

    pk = None
    is_active = True
    is_authenticated = True
    is_superuser = False

    def __post_init__(self):
        if self.role not in (Role.VIEWER, Role.OPERATOR):
            raise ValueError(f"a machine may act as a viewer or an operator, not as {self.role}")

    def get_username(self) -> str:
        return self.label


def person_of(actor):
    """The person behind ``actor`` (a user, or a ``Machine``: None), whom four eyes counts."""
    return None if isinstance(actor, Machine) else actor


def roles_of(user) -> dict[int, str]:
    """The user's role per workspace id, read once per user object (a request's user)."""
    if isinstance(user, Machine):
        return {user.workspace_id: user.role}
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return {}
    cached = getattr(user, "_opsconsole_roles", None)
    if cached is None:
        cached = dict(Membership.objects.filter(user=user).values_list("workspace_id", "role"))
        user._opsconsole_roles = cached
    return cached


def can(user, capability: str, workspace_id: int | None) -> bool:
    """Whether ``user`` holds ``capability`` in the workspace (``None``: beyond any one workspace)."""
    if workspace_id is None:
        return _superuser(user)
    return grants(user, roles_of(user).get(workspace_id), capability)


def grants(user, role: str | None, capability: str) -> bool:
    """``can`` in a workspace where ``user``'s role was read already (None: no member), as an API
    token reads it (``accounts.authenticate_token``): no query of its own."""
    return _superuser(user) or (role is not None and capability in GRANTS[Role(role)])


def _superuser(user) -> bool:
    return bool(getattr(user, "is_superuser", False) and user.is_active)


def workspace_ids(user, capability: str = VIEW) -> set[int] | None:
    """The workspaces where ``user`` holds ``capability``; None means all of them (a superuser)."""
    if _superuser(user):
        return None
    return {workspace_id for workspace_id, role in roles_of(user).items() if capability in GRANTS[Role(role)]}


def visible(queryset: QuerySet, user, *, via: str = "workspace", capability: str = VIEW) -> QuerySet:
    """``queryset`` narrowed to the workspaces where ``user`` holds ``capability`` (``via`` is the
    path to the workspace; rows of no workspace are a superuser's only)."""
    ids = workspace_ids(user, capability)
    if ids is None:
        return queryset
    return queryset.filter(Q(**{f"{via}_id__in" if via != "pk" else "pk__in": ids}))


def workspaces(user, capability: str = VIEW) -> QuerySet:
    return visible(Workspace.objects.all(), user, via="pk", capability=capability)


def refusal(user, capability: str, workspace) -> str:
    """The message for a person who lacks ``capability`` in ``workspace``."""
    where = f"workspace {workspace.slug}" if workspace is not None else "every workspace"
    return f"{user.get_username()} may not {DESCRIBE[capability]} in {where}."
