"""``manage.py integrations apply FILE [--dry-run] [--check-openapi [DESTINATION=]vendor.yaml ...]``
and ``manage.py integrations export``: the integrations (destinations, HTTP actions, sources of
signed webhooks and subscriptions to notifications) as a YAML or JSON file
(``ledger.integrations.file``), checked against the vendors' OpenAPI documents first when asked
(``ledger.integrations.openapi_check``)."""

import sys
from functools import partial

from django.core.management.base import BaseCommand, CommandError

from ledger.integrations import file as integrations_file
from ledger.integrations import openapi_check
from ledger.integrations.saving import SLUG


class Command(BaseCommand):
    help = "Apply an integrations file (YAML or JSON; '-' for stdin), or export the current one."

    def add_arguments(self, parser):
        verbs = parser.add_subparsers(dest="verb", required=True)
        apply = verbs.add_parser("apply", help="apply FILE as one change: all of it, or nothing")
        apply.add_argument("file")
        apply.add_argument("--dry-run", action="store_true", help="print the changes, make none")
        apply.add_argument("--as", dest="actor", default="integrations", help="who the audit trail names")
        apply.add_argument(
            "--check-openapi",
            action="append",
            default=[],
            metavar="[DESTINATION=]FILE",
            help="first check the HTTP actions calling DESTINATION against the vendor's OpenAPI document FILE "
            "(DESTINATION= may be left out when the file's HTTP actions call one destination); repeatable",
        )
        verbs.add_parser("export", help="print every integration in the file format apply takes")

    def handle(self, *args, verb, **options):
        if verb == "export":
            self.stdout.write(integrations_file.export(), ending="")
            return
        text = sys.stdin.read() if options["file"] == "-" else self._read(options["file"])
        try:
            document = integrations_file.read(text)
            check = None
            if options["check_openapi"]:
                check = partial(openapi_check.check, vendors=self._vendors(options["check_openapi"]))
            changes = integrations_file.apply(document, actor=options["actor"], dry_run=options["dry_run"], check=check)
        except integrations_file.IntegrationsError as exc:
            raise CommandError("nothing changed:\n  " + "\n  ".join(exc.problems)) from None
        for change in changes:
            self.stdout.write(f"{'would change' if options['dry_run'] else 'changed'}: {change}")
        if not changes:
            self.stdout.write("no changes")

    def _vendors(self, arguments: list[str]) -> dict[str | None, openapi_check.VendorDocument]:
        vendors: dict[str | None, openapi_check.VendorDocument] = {}
        problems = []
        for argument in arguments:
            slug, equals, path = argument.partition("=")
            if not equals or not SLUG.fullmatch(slug):
                slug, path = "", argument  # a bare FILE, whatever its name holds
            if (slug or None) in vendors:
                raise CommandError(f"--check-openapi: two documents for {slug or 'the destination'}")
            try:
                vendors[slug or None] = openapi_check.load(self._read(path), name=path)
            except integrations_file.IntegrationsError as exc:
                problems += exc.problems
        if problems:
            raise integrations_file.IntegrationsError(problems)
        return vendors

    @staticmethod
    def _read(path: str) -> str:
        try:
            with open(path, encoding="utf-8") as file:
                return file.read()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
