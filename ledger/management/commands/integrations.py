"""``manage.py integrations apply FILE [--dry-run]`` and ``manage.py integrations export``: the
integrations (destinations, HTTP actions, sources of signed webhooks and subscriptions to
notifications) as a YAML or JSON file
(``ledger.integrations.file``)."""

import sys

from django.core.management.base import BaseCommand, CommandError

from ledger.integrations import file as integrations_file


class Command(BaseCommand):
    help = "Apply an integrations file (YAML or JSON; '-' for stdin), or export the current one."

    def add_arguments(self, parser):
        verbs = parser.add_subparsers(dest="verb", required=True)
        apply = verbs.add_parser("apply", help="apply FILE as one change: all of it, or nothing")
        apply.add_argument("file")
        apply.add_argument("--dry-run", action="store_true", help="print the changes, make none")
        apply.add_argument("--as", dest="actor", default="integrations", help="who the audit trail names")
        verbs.add_parser("export", help="print every integration in the file format apply takes")

    def handle(self, *args, verb, **options):
        if verb == "export":
            self.stdout.write(integrations_file.export(), ending="")
            return
        text = sys.stdin.read() if options["file"] == "-" else self._read(options["file"])
        try:
            changes = integrations_file.apply(
                integrations_file.read(text), actor=options["actor"], dry_run=options["dry_run"]
            )
        except integrations_file.IntegrationsError as exc:
            raise CommandError("nothing changed:\n  " + "\n  ".join(exc.problems)) from None
        for change in changes:
            self.stdout.write(f"{'would change' if options['dry_run'] else 'changed'}: {change}")
        if not changes:
            self.stdout.write("no changes")

    @staticmethod
    def _read(path: str) -> str:
        try:
            with open(path, encoding="utf-8") as file:
                return file.read()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
