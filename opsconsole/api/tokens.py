"""The API's bearer tokens: each route names the scope it needs (``ApiToken.scopes``), and a token
without it is refused 403 with the scope named, before the route reads anything. A person's token
then acts as that person, with their role in the token's workspace (the services check it, as
for the console); a machine's with ``operate`` acts as an operator of its workspace, named by the
token, and never approves."""

from ninja.security import HttpBearer

from ledger.core import privacy, roles
from ledger.core.accounts import authenticate_token
from ledger.models import Role, Scope
from opsconsole.api.answers import MissingScope
from opsconsole.api.problems import ApiProblem


class WorkspaceToken(HttpBearer):
    """A live token of a workspace holding ``scope``; sets on the request who acts and where."""

    def __init__(self, scope: Scope):
        super().__init__()
        self.scope = Scope(scope)

    def authenticate(self, request, token):
        api_token = authenticate_token(token)
        if api_token is None:
            return None
        request.workspace = api_token.workspace
        # A person's token submits as that person (who then cannot approve what they sent).
        request.person = api_token.user
        # Read with the token (authenticate_token): what the answers' masking needs.
        request.workspace_role = api_token.workspace_role  # type: ignore[attr-defined]
        request.submitter = api_token.user.get_username() if api_token.user else f"token:{api_token.hint}"
        if self.scope not in api_token.scopes:
            raise ApiProblem(403, answer=self.missing(api_token))
        return api_token

    def missing(self, api_token) -> MissingScope:
        owner = "machine" if api_token.user is None else "person"
        if self.scope == Scope.APPROVE and api_token.user is None:
            # No scope would help: only people approve. Say what would.
            advice = (
                "A machine's token can never have it: only people approve. Use an approver's own token "
                "(manage.py token issue WORKSPACE --user APPROVER --scopes read,approve)."
            )
        else:
            advice = "Ask for a token with it (manage.py token scopes, or the admin)."
        return MissingScope(
            reason="missing_scope",
            detail=f"This token ({api_token.hint}, a {owner}'s) lacks the {self.scope.value} scope this route "
            f"needs ({self.scope.label}); it has {', '.join(api_token.scopes)}. {advice}",
            scope=self.scope.value,
        )


EVENTS, CLAIMS, READ = WorkspaceToken(Scope.EVENTS), WorkspaceToken(Scope.CLAIMS), WorkspaceToken(Scope.READ)
OPERATE, APPROVE = WorkspaceToken(Scope.OPERATE), WorkspaceToken(Scope.APPROVE)


def actor_of(request):
    """Who acts on a route that needs the ``operate`` scope: the token's person, with their role; or
    a machine's token, as an operator of its workspace (``roles.Machine``), named ``token:<hint>``."""
    if request.person is not None:
        return request.person
    return roles.Machine(workspace_id=request.workspace.pk, label=request.submitter, role=Role.OPERATOR)


def reveals(request) -> bool:
    """Whether the token's person may see sensitive values in its workspace (a machine's may not):
    what the operations in an answer show."""
    return privacy.may_view_sensitive_as(request.person, request.workspace_role)
