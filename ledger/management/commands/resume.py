from django.core.management.base import BaseCommand, CommandError

from ledger.management.arguments import add_scope_arguments, resolve_scope
from ledger.people import pause


class Command(BaseCommand):
    help = "Resume processing for a scope paused before (no option: the global switch); held work drains."

    def add_arguments(self, parser):
        add_scope_arguments(parser)

    def handle(self, *args, workspace, action, **options):
        target, action = resolve_scope(workspace, action)
        try:
            control = pause.set_paused(paused=False, workspace=target, action=action, actor="cli")
        except pause.NotPaused as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Resumed {control.scope_label}.")
