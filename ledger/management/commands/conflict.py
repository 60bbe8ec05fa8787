from django.core.management.base import BaseCommand, CommandError

from ledger.management.arguments import find_user
from ledger.models import Conflict
from ledger.people import conflict_decisions, review


class Command(BaseCommand):
    help = "Review conflicts (a key reused with a different payload): list the open ones, dismiss or apply one."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="verb", required=True)
        listing = sub.add_parser("list", help="Open conflicts, oldest first.")
        listing.add_argument("--workspace", help="Only this workspace (slug).")
        for verb, text in [
            ("dismiss", "Keep the recorded payload."),
            ("apply", "Use the incoming payload (only before the operation runs)."),
        ]:
            decide = sub.add_parser(verb, help=text)
            decide.add_argument("conflict_id", type=int)
            decide.add_argument(
                "--as",
                dest="username",
                required=True,
                help="Who decides: a user with the review permission (applying a side of a conflict in sensitive "
                "fields: one who sees them, an approver or admin).",
            )
            decide.add_argument("--reason", required=True, help="Why: kept in the audit trail.")

    def handle(self, *args, verb, **options):
        if verb == "list":
            return self._list(options.get("workspace"))
        conflict = Conflict.objects.select_related("operation").filter(pk=options["conflict_id"]).first()
        if conflict is None:
            raise CommandError(f"No conflict {options['conflict_id']}.")
        user = find_user(options["username"])
        decide = conflict_decisions.apply_conflict if verb == "apply" else conflict_decisions.dismiss_conflict
        try:
            decide(conflict, user=user, reason=options["reason"])
        except review.ReviewError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Conflict {conflict.pk} on {conflict.operation.key}: {conflict.status}.")

    def _list(self, workspace):
        conflicts = Conflict.objects.filter(status=Conflict.Status.OPEN).select_related("operation").order_by("id")
        if workspace:
            conflicts = conflicts.filter(operation__workspace__slug=workspace)
        for conflict in conflicts:
            fields = ", ".join(d["field"] for d in conflict.differences)
            operation = conflict.operation
            self.stdout.write(f"{conflict.pk}  {operation.key}  ({operation.state})  differs in: {fields}")
