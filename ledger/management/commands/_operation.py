"""The shape shared by commands that act on one operation as a named person (replay, resolve,
cancel, approve, reject)."""

from django.core.management.base import BaseCommand, CommandError

from ledger.management.arguments import find_operation, find_user
from ledger.models import Operation
from ledger.people import approvals, review


class OperationCommand(BaseCommand):
    """Finds the operation by workspace and key and the person by username, calls ``act``, reports
    the new state. The person needs the review permission; they are named in the audit trail."""

    def add_arguments(self, parser):
        parser.add_argument("key", help="The operation key, e.g. demo:R-42:v3:prepare-brief")
        parser.add_argument("--workspace", required=True)
        parser.add_argument(
            "--as",
            dest="username",
            required=True,
            help="Who acts: a user with the review permission (kept in the audit trail).",
        )
        parser.add_argument("--reason", required=True, help="Why: kept in the audit trail.")

    def act(self, operation: Operation, *, user, reason: str, **options) -> str:
        """Call the service; returns what to print, or raises ReviewError."""
        raise NotImplementedError

    def handle(self, *args, key, workspace, username, reason, **options):
        operation = find_operation(key=key, workspace=workspace)
        user = find_user(username)
        try:
            said = self.act(operation, user=user, reason=reason, **options)
        except review.ReviewError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(said or f"{operation.key} is now {operation.state}.")


class ApprovalCommand(BaseCommand):
    """Decides on a consequential operation as a named user, who needs the approve permission."""

    def add_arguments(self, parser):
        parser.add_argument("key", help="The operation key, e.g. demo:R-7:v1:issue-refund")
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--as", dest="username", required=True, help="The approver's username.")
        parser.add_argument("--note", default="", help="Kept with the decision and in the audit trail.")

    def decide(self, operation: Operation, *, user, note: str):
        raise NotImplementedError

    def handle(self, *args, key, workspace, username, note, **options):
        operation = find_operation(key=key, workspace=workspace)
        user = find_user(username)
        try:
            self.decide(operation, user=user, note=note)
        except approvals.ApprovalError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{operation.key} is now {operation.state}.")
