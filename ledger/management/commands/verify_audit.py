from django.core.management.base import BaseCommand, CommandError

from ledger.core.audit_chain import verify_chains
from ledger.core.audit_heads import check_heads
from ledger.models import AuditEvent, Workspace


class Command(BaseCommand):
    help = (
        "Check that no audit event was changed, removed or inserted since it was written: walks each "
        "workspace's hash chain, each event under its own audit key, and reports the first broken link "
        "(exit 1). With --heads FILE (the lines export_audit_heads wrote), also checks that every head "
        "exported is still on its chain, so the newest events cut off are found too."
    )

    def add_arguments(self, parser):
        parser.add_argument("--heads", metavar="FILE", help="a file of exported heads (OPSCONSOLE_AUDIT_HEADS_TO)")

    def handle(self, *args, heads=None, **options):
        report = verify_chains()
        slugs = dict(Workspace.objects.values_list("pk", "slug"))
        for chain in report.chains:
            name = f"workspace {slugs.get(chain.workspace_id, chain.workspace_id)}" if chain.workspace_id else "global"
            older = f" ({chain.unchained} from before chaining)" if chain.unchained else ""
            self.stdout.write(f"{name}: {chain.events} events{older}, head {chain.head or '-'}")
        if report.broken:
            broken = report.broken
            event = AuditEvent.objects.filter(pk=broken.event_id).values_list("kind", "created_at").first()
            what = f" ({event[0]}, {event[1]:%Y-%m-%d %H:%M:%S})" if event else ""
            raise CommandError(f"Audit chain broken: event {broken.event_id}{what} {broken.problem}.")
        if heads:
            try:
                with open(heads, encoding="utf-8") as lines:
                    checked = check_heads(lines)
            except OSError as error:
                raise CommandError(f"Cannot read the exported heads: {error}") from error
            if checked.problem:
                raise CommandError(f"Audit chain broken: {checked.problem}.")
            self.stdout.write(f"exported heads: {checked.lines} lines, all on their chains")
        self.stdout.write(
            f"Audit trail intact: {sum(c.events for c in report.chains)} events in {len(report.chains)} chain(s)."
        )
