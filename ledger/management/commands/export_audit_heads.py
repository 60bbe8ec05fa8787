import httpx
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from ledger.core.audit_heads import export_heads


class Command(BaseCommand):
    help = (
        "Export the audit chains' heads now, as a signed JSON line, to OPSCONSOLE_AUDIT_HEADS_TO "
        "(file:///path appends it, http(s)://... POSTs it); a schedule does it every 5 minutes."
    )

    def add_arguments(self, parser):
        parser.add_argument("--to", help="a destination other than OPSCONSOLE_AUDIT_HEADS_TO")

    def handle(self, *args, to=None, **options):
        destination = to or settings.OPSCONSOLE_AUDIT_HEADS_TO
        if not destination:
            raise CommandError(
                "No destination: set OPSCONSOLE_AUDIT_HEADS_TO (file:///path or https://...) or give --to."
            )
        try:
            self.stdout.write(export_heads(destination))
        except (OSError, ValueError) as error:
            raise CommandError(f"Heads not exported: {error}") from error
        except httpx.HTTPError as error:  # its text would name the URL, which may carry a token
            raise CommandError(f"Heads not exported: the endpoint failed ({type(error).__name__})") from error
