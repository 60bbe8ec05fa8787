from django.core.management.base import BaseCommand, CommandError

from ledger.core import accounts
from ledger.management.arguments import find_user
from ledger.models import Membership, Role, Workspace


class Command(BaseCommand):
    help = (
        "Who belongs to a workspace, with which role (viewer, operator, approver, admin): a person sees "
        "and acts on their workspaces only; a superuser on all."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="verb", required=True)
        add = sub.add_parser("add", help="Add a person to a workspace, or change their role there.")
        add.add_argument("workspace")
        add.add_argument("username")
        add.add_argument("--role", required=True, choices=Role.values)
        remove = sub.add_parser("remove", help="Take a person out of a workspace.")
        remove.add_argument("workspace")
        remove.add_argument("username")
        listing = sub.add_parser("list", help="The members of one workspace, or of all.")
        listing.add_argument("workspace", nargs="?")
        deactivate = sub.add_parser(
            "deactivate", help="Offboard a person: no more logins, and every API token of theirs revoked."
        )
        deactivate.add_argument("username")

    def handle(self, *args, verb, workspace=None, **options):
        target = None
        if workspace:
            target = Workspace.objects.filter(slug=workspace).first()
            if target is None:
                raise CommandError(f"No workspace {workspace!r}.")
        getattr(self, f"_{verb}")(target, **options)

    def _add(self, workspace, *, username, role, **options):
        user = find_user(username)
        membership = accounts.set_membership(workspace=workspace, user=user, role=role, actor="cli")
        self.stdout.write(f"{user.get_username()} is {membership.role} of {workspace.slug}.")

    def _remove(self, workspace, *, username, **options):
        user = find_user(username)
        try:
            revoked = accounts.remove_membership(workspace=workspace, user=user, actor="cli")
        except accounts.NotAMember as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{user.get_username()} is no longer a member of {workspace.slug}; {_revoked(revoked)}.")

    def _deactivate(self, workspace, *, username, **options):
        user = find_user(username)
        revoked = accounts.deactivate_person(user, actor="cli")
        self.stdout.write(f"{user.get_username()} is deactivated (can no longer log in); {_revoked(revoked)}.")

    def _list(self, workspace, **options):
        members = Membership.objects.select_related("user", "workspace").order_by("workspace__slug", "user__username")
        if workspace is not None:
            members = members.filter(workspace=workspace)
        for membership in members:
            self.stdout.write(f"{membership.workspace.slug}  {membership.user.get_username():<20} {membership.role}")


def _revoked(count: int) -> str:
    if not count:
        return "no API tokens to revoke"
    return f"{count} API token{'' if count == 1 else 's'} of theirs revoked"
