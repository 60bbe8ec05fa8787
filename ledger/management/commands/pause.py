from django.core.management.base import BaseCommand

from ledger.management.arguments import add_scope_arguments, resolve_scope
from ledger.people import pause


class Command(BaseCommand):
    help = "Pause processing: globally (no option), for a workspace, an action, or both."

    def add_arguments(self, parser):
        parser.add_argument("--reason", required=True)
        add_scope_arguments(parser)

    def handle(self, *args, reason, workspace, action, **options):
        target, action = resolve_scope(workspace, action)
        control = pause.set_paused(paused=True, reason=reason, workspace=target, action=action, actor="cli")
        self.stdout.write(f"Paused {control.scope_label}: {reason}")
