from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from ledger.core import accounts
from ledger.management.arguments import find_user


class Command(BaseCommand):
    help = "Create a workspace and its first API token. The token is printed once, alone on the last line."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--owners", default="", help="Comma-separated approved owners, e.g. ops,finance")
        parser.add_argument(
            "--retry-budget",
            type=int,
            default=None,
            help="Retries per hour it may schedule (default: OPSCONSOLE_RETRY_BUDGET_PER_HOUR)",
        )
        parser.add_argument(
            "--user",
            default=None,
            help="The person the first token belongs to, made the workspace's admin (they "
            "cannot approve what the token submits); without --user it is a machine's.",
        )

    def handle(self, *args, slug, owners, retry_budget, user, **options):
        approved = [owner.strip() for owner in owners.split(",") if owner.strip()]
        person = find_user(user) if user else None
        try:
            workspace, token = accounts.create_workspace(
                slug=slug,
                approved_owners=approved,
                actor="cli",
                retry_budget_per_hour=retry_budget,
                user=person,
            )
        except accounts.WorkspaceExists as exc:
            raise CommandError(str(exc)) from None
        except ValidationError as exc:
            raise CommandError("; ".join(f"{f}: {' '.join(m)}" for f, m in exc.message_dict.items())) from None
        self.stdout.write(
            f"Created workspace {workspace.slug} (approved owners: {', '.join(approved) or 'none'}; "
            f"retry budget {workspace.retry_budget_per_hour}/hour)."
        )
        self.stdout.write("API token (shown once, store it now):")
        self.stdout.write(token)
