"""The shape shared by commands that act on one operation (replay, cancel)."""

from collections.abc import Callable

from django.core.management.base import BaseCommand, CommandError

from ledger import review
from ledger.models import Operation


class OperationCommand(BaseCommand):
    """Finds the operation by workspace and key, calls ``service`` on it, reports its new state."""

    service: Callable[..., Operation]

    def add_arguments(self, parser):
        parser.add_argument("key", help="The operation key, e.g. demo:R-42:v3:prepare-brief")
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--reason", required=True, help="Why: kept in the audit trail.")

    def handle(self, *args, key, workspace, reason, **options):
        operation = Operation.objects.select_related("workspace").filter(workspace__slug=workspace, key=key).first()
        if operation is None:
            raise CommandError(f"No operation {key!r} in workspace {workspace!r}.")
        try:
            self.service(operation, actor="cli", reason=reason)
        except review.ReviewError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{operation.key} is now {operation.state}.")
