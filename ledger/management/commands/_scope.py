"""The scope options shared by the pause and resume commands."""

from django.core.management.base import CommandError

from ledger.actions import registry
from ledger.models import Workspace


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
