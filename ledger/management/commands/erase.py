from django.core.management.base import BaseCommand, CommandError

from ledger.core import privacy
from ledger.core.erasure import ErasureError, erase_values
from ledger.management.arguments import find_user
from ledger.models import Workspace


class Command(BaseCommand):
    help = (
        "Erase one data subject: replace every value VALUE of the sensitive field FIELD in the workspace's "
        f"payloads, results and conflicts by {privacy.REDACTED!r}. Keys and fingerprints stay (a redelivery is "
        "still a duplicate); audited with the field and counts, never the value. Refused while an operation "
        "holding the value has not finished."
    )

    def add_arguments(self, parser):
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--field", required=True, help="A field some action declares sensitive, e.g. customer_id.")
        parser.add_argument(
            "--value", required=True, help="The data subject's value, e.g. C-9 (a number as its digits)."
        )
        parser.add_argument(
            "--as",
            dest="username",
            required=True,
            help="Who erases: an admin of the workspace (kept in the audit trail).",
        )
        parser.add_argument(
            "--reason",
            required=True,
            help="Why, e.g. the erasure request's reference (kept in the audit trail; not the value).",
        )
        parser.add_argument("--dry-run", action="store_true", help="Count what would be erased; change nothing.")

    def handle(self, *args, workspace, field, value, username, reason, dry_run, **options):
        target = Workspace.objects.filter(slug=workspace).first()
        if target is None:
            raise CommandError(f"No workspace {workspace!r}.")
        user = find_user(username)
        try:
            erasure = erase_values(
                workspace=target, field=field, value=value, user=user, reason=reason, dry_run=dry_run
            )
        except ErasureError as exc:
            raise CommandError(str(exc)) from None
        verb = "Would erase" if dry_run else "Erased"
        self.stdout.write(f"{verb} {field} in workspace {target.slug}: {erasure.describe()}.")
