import json
import sys

from django.core.management.base import BaseCommand, CommandError

from ledger.intake import decoding, submit
from ledger.management.arguments import find_member
from ledger.models import Delivery, Workspace
from opsconsole.api import answers


class Command(BaseCommand):
    help = (
        "Submit events as JSON lines (one envelope per line) from FILE or '-' for standard input. "
        "Prints one result object per line (the API's answer to the event); exits 0 only if nothing was blocked."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", nargs="?", default="-")
        parser.add_argument("--workspace", required=True)
        parser.add_argument(
            "--as",
            dest="username",
            default=None,
            help="The person submitting (they then cannot approve what they submit); "
            "without --as the submitter is the machine 'cli'.",
        )

    def handle(self, *args, file, workspace, username, **options):
        try:
            target = Workspace.objects.get(slug=workspace)
        except Workspace.DoesNotExist:
            raise CommandError(f"No workspace {workspace!r}.") from None
        person = find_member(username, target) if username else None
        sender = {"submitted_by": person.get_username() if person else "cli", "person": person}
        try:
            stream = sys.stdin if file == "-" else open(file, encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"Cannot read {file}: {exc.strerror}") from None
        blocked = 0
        with stream:
            for line_number, line in enumerate(stream, start=1):
                if not line.strip():
                    continue
                result = self._submit_line(target, line, sender)
                blocked += result.blocked
                self.stdout.write(
                    json.dumps({"line": line_number, "http_status": result.http_status, **answers.intake_body(result)})
                )
        if blocked:
            raise SystemExit(1)

    def _submit_line(self, workspace, line, sender):
        source = Delivery.Source.CLI
        try:
            raw = decoding.decode_json(line)
        except decoding.MalformedJSON as exc:  # duplicate_key too, as the API answers it
            return submit.record_blocked_delivery(
                workspace=workspace, source=source, **sender, reason=exc.reason, errors=exc.errors, http_status=400
            )
        return submit.submit_event(workspace=workspace, raw=raw, source=source, **sender)
