"""What the management commands' arguments name (an operation by its key, a user by their username,
a workspace's member), found, or refused with a CommandError that says what was not found."""

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from ledger.core import roles
from ledger.models import Operation


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
