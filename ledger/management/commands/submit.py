import json
import sys

from django.core.management.base import BaseCommand, CommandError

from ledger import intake
from ledger.models import Delivery, Workspace


class Command(BaseCommand):
    help = ("Submit events as JSON lines (one envelope per line) from FILE or '-' for standard input. "
            "Prints one result object per line; exits 0 only if nothing was blocked.")

    def add_arguments(self, parser):
        parser.add_argument("file", nargs="?", default="-")
        parser.add_argument("--workspace", required=True)

    def handle(self, *args, file, workspace, **options):
        try:
            target = Workspace.objects.get(slug=workspace)
        except Workspace.DoesNotExist:
            raise CommandError(f"No workspace {workspace!r}.") from None
        try:
            stream = sys.stdin if file == "-" else open(file, encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"Cannot read {file}: {exc.strerror}") from None
        blocked = 0
        with stream:
            for line_number, line in enumerate(stream, start=1):
                if not line.strip():
                    continue
                result = self._submit_line(target, line)
                blocked += result.blocked
                self.stdout.write(json.dumps({"line": line_number, "http_status": result.http_status,
                                              **result.as_dict()}))
        if blocked:
            raise SystemExit(1)

    def _submit_line(self, workspace, line):
        source = Delivery.Source.CLI
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            message = f"malformed JSON: {exc}"
        except RecursionError:
            message = "malformed JSON: nested too deeply"
        else:
            return intake.submit_event(workspace=workspace, raw=raw, source=source, submitted_by="cli")
        return intake.record_blocked_delivery(
            workspace=workspace, source=source, submitted_by="cli", reason="malformed_json",
            errors=[{"field": "body", "message": message}], http_status=400,
        )
