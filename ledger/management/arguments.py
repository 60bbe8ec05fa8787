"""What the management commands' arguments name (an operation by its key, a user by their username,
a workspace's member, the scope of a pause or a policy), found, or refused with a CommandError that
says what was not found."""

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from ledger.actions import registry
from ledger.core import roles
from ledger.models import Operation, Workspace


def find_operation(*, key: str, workspace: str) -> Operation:
    operation = Operation.objects.select_related("workspace").filter(workspace__slug=workspace, key=key).first()
    if operation is None:
        raise CommandError(f"No operation {key!r} in workspace {workspace!r}.")
    return operation


def find_user(username: str):
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        raise CommandError(f"No active user {username!r}.")
    return user


def find_member(username: str, workspace) -> object:
    """An active user who belongs to ``workspace`` (any role), or a CommandError saying why not."""
    user = find_user(username)
    ids = roles.workspace_ids(user)
    if ids is not None and workspace.pk not in ids:
        raise CommandError(
            f"{username} is not a member of workspace {workspace.slug} "
            f"(python manage.py member add {workspace.slug} {username} --role ...)."
        )
    return user


def add_scope_arguments(parser):
    parser.add_argument("--workspace", help="Only this workspace (slug).")
    parser.add_argument("--action", default="", help="Only this action type.")


def resolve_scope(workspace: str | None, action: str) -> tuple[Workspace | None, str]:
    target = None
    if workspace:
        target = Workspace.objects.filter(slug=workspace).first()
        if target is None:
            raise CommandError(f"No workspace {workspace!r}.")
    if action and action not in registry:
        raise CommandError(f"Unknown action {action!r}; known: {', '.join(sorted(registry))}.")
    return target, action
