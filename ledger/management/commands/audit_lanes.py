"""``manage.py audit_lanes SLUG [N]``: how many audit chains (lanes) a workspace's events are spread
over, or set it (``ledger.core.accounts.set_audit_lanes``, audited)."""

from django.core.management.base import BaseCommand, CommandError

from ledger.core import accounts
from ledger.models import Workspace


class Command(BaseCommand):
    help = "Show or set how many audit chains (lanes) a workspace's events are spread over (1 to 64)."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("lanes", nargs="?", type=int, help="the new count (left out: show the current one)")
        parser.add_argument("--as", dest="actor", default="cli", help="who the audit trail names")

    def handle(self, *args, slug, lanes, actor, **options):
        workspace = Workspace.objects.filter(slug=slug).first()
        if workspace is None:
            raise CommandError(f"No workspace {slug!r}.")
        if lanes is None:
            self.stdout.write(f"{slug}: {workspace.audit_lanes} audit lane(s).")
            return
        before = workspace.audit_lanes
        try:
            changed = accounts.set_audit_lanes(workspace, lanes=lanes, actor=actor)
        except accounts.BadAuditLanes as exc:
            raise CommandError(str(exc)) from None
        if changed:
            self.stdout.write(f"{slug}: audit lanes {before} -> {lanes} (audited; the next append uses them).")
        else:
            self.stdout.write(f"{slug}: already {lanes} audit lane(s); nothing changed.")
