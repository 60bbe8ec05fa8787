from django.core.management.base import BaseCommand, CommandError

from ledger.actions import registry
from ledger.core import policies
from ledger.management.arguments import resolve_scope
from ledger.models import Ordering


class Command(BaseCommand):
    help = (
        "Show or set an action's policy: retention windows and ordering (docs/retention.md). Without "
        "--workspace, set applies to every workspace that does not set its own."
    )

    def add_arguments(self, parser):
        parser.add_argument("verb", choices=["show", "set"])
        parser.add_argument("--workspace", help="The workspace (slug); set without it: every workspace.")
        parser.add_argument("--action", default="", help="The action type (show without it: every action).")
        parser.add_argument("--payload-retention", help="e.g. 7d: how long a finished operation keeps its payload.")
        parser.add_argument("--key-retention", help="e.g. 90d: how long its key (tombstone) is kept.")
        parser.add_argument(
            "--ordering", choices=[*Ordering.values, policies.INHERIT], help="How versions of one request are ordered."
        )
        parser.add_argument("--gap-wait", help="in_order: e.g. 10m, how long a version waits for a missing one.")
        # Each option also takes "inherit": the value then comes from every workspace's, or the action's.

    def handle(self, *args, verb, workspace, action, **options):
        target, action = resolve_scope(workspace, action)
        if verb == "show":
            self._show(target, [action] if action else sorted(registry))
            return
        if not action:
            raise CommandError("set needs --action.")
        try:
            changes = {
                name: policies.parse_duration(options[name]) if options[name] else None
                for name in ("payload_retention", "key_retention", "gap_wait")
            }
            changed = policies.set_policy(
                workspace=target, action=action, actor="cli", ordering=options["ordering"], **changes
            )
        except policies.PolicyError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Set the policy of {action} in {target.slug if target else 'every workspace'}.")
        self._show(target, [changed.action])

    def _show(self, workspace, actions):
        self.stdout.write(f"Policies in {workspace.slug if workspace else 'every workspace'}:")
        for name in actions:
            policy = policies.policy_for(workspace.pk if workspace else None, name)
            sources = dict(policy.sources)
            shown = ", ".join(
                f"{field.replace('_', ' ')} {_value(getattr(policy, field))} ({sources[field]})"
                for field in policies.FIELDS
            )
            self.stdout.write(f"  {name}: {shown}")


def _value(value) -> str:
    return policies.format_duration(value) if hasattr(value, "total_seconds") else str(value)
