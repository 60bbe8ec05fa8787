from django.core.management.base import BaseCommand, CommandError

from ledger.core import accounts
from ledger.management.arguments import find_member
from ledger.models import ApiToken, Scope, Workspace
from ledger.models.people import DEFAULT_SCOPES

SCOPES_HELP = (
    f"What the token may be used for, comma-separated, of: {', '.join(Scope.values)} "
    "(docs/api-for-flows.md). approve: a person's token only."
)


def scope_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


class Command(BaseCommand):
    help = (
        "Manage a workspace's API tokens: list, issue (printed once, alone on the last line), "
        "change a token's scopes, revoke."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="verb", required=True)
        listing = sub.add_parser("list", help="The workspace's tokens (hints only) and their scopes.")
        listing.add_argument("workspace")
        issue = sub.add_parser("issue", help="A new token; the value is shown this once.")
        issue.add_argument("workspace")
        issue.add_argument("--name", default="", help="What the token is for, e.g. the sending system.")
        issue.add_argument(
            "--user",
            default=None,
            help="The person the token belongs to: what it submits is theirs, so they cannot "
            "approve it. Without --user the token is a machine's.",
        )
        issue.add_argument(
            "--scopes",
            type=scope_list,
            default=DEFAULT_SCOPES,
            help=f"{SCOPES_HELP} Default: {','.join(DEFAULT_SCOPES)}.",
        )
        scopes = sub.add_parser("scopes", help="Give a live token exactly these scopes (audited).")
        scopes.add_argument("workspace")
        scopes.add_argument("hint", help="The token's first characters, as `list` shows them.")
        scopes.add_argument("scopes", type=scope_list, help=SCOPES_HELP)
        revoke = sub.add_parser("revoke", help="Refuse the token from now on.")
        revoke.add_argument("workspace")
        revoke.add_argument("hint", help="The token's first characters, as `list` shows them.")

    def handle(self, *args, verb, workspace, **options):
        target = Workspace.objects.filter(slug=workspace).first()
        if target is None:
            raise CommandError(f"No workspace {workspace!r}.")
        try:
            getattr(self, f"_{verb}")(target, **options)
        except (accounts.TokenNotFound, accounts.BadScopes) as exc:
            raise CommandError(str(exc)) from None

    def _list(self, workspace, **options):
        for api_token in ApiToken.objects.filter(workspace=workspace).select_related("user").order_by("created_at"):
            status = f"revoked {api_token.revoked_at:%Y-%m-%d %H:%M}" if api_token.revoked_at else "live"
            owner = api_token.user.get_username() if api_token.user else "machine"
            scopes = ",".join(api_token.scopes)
            self.stdout.write(f"{api_token.hint}  {status:<22} {owner:<20} {scopes:<34} {api_token.name}")

    def _issue(self, workspace, *, name, user, scopes, **options):
        person = find_member(user, workspace) if user else None
        token = accounts.issue_token(workspace=workspace, name=name, actor="cli", user=person, scopes=scopes)
        owner = f"belonging to {person.get_username()}" if person else "a machine's (no person behind it)"
        granted = ", ".join(accounts.checked_scopes(scopes, person=person is not None))
        self.stdout.write(f"New API token for workspace {workspace.slug}, {owner}, with the scopes {granted}.")
        self.stdout.write("It is shown this once: store it now.")
        self.stdout.write(token)

    def _scopes(self, workspace, *, hint, scopes, **options):
        api_token = accounts.live_token(workspace=workspace, hint=hint, doing="changed")
        changed = accounts.set_token_scopes(api_token, scopes=scopes, actor="cli")
        said = "now has" if changed else "already had"
        self.stdout.write(
            f"{api_token.hint} ({api_token.name or 'unnamed'}) of {workspace.slug} {said} the scopes "
            f"{', '.join(api_token.scopes)}."
        )

    def _revoke(self, workspace, *, hint, **options):
        api_token = accounts.revoke_token(workspace=workspace, hint=hint, actor="cli")
        self.stdout.write(f"Revoked {api_token.hint} ({api_token.name or 'unnamed'}) of {workspace.slug}.")
