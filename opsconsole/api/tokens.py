"""The API's bearer tokens: each route names the scope it needs (``ApiToken.scopes``), and a token
without it is refused 403 with the scope named, before the route reads anything. A person's token
then acts as that person, with their role in the token's workspace (the services check it, as
for the console); a machine's with ``operate`` acts as an operator of its workspace, named by the
token, and never approves.

Intake's routes (``EVENTS``) and the claim's (``CLAIMING``: a claim, a batch of them, an outcome
report) take a token from the process's cache when it is there (``accounts.cached_token``): no
lookup before the view, the write checking in its own statement that the token is still as cached
(``ledger_token_unchanged``, inside the reservation, the claim or the report's call, or alone before
a write the call does not make), so a single event or claim costs one round trip where it cost
two. ``checked_by_reservation`` wraps those views: a token found changed (``TokenChanged``, nothing
written) is looked up again and the request answered as a lookup first would have (401, 403, or
done with what the token is now: ``reserving``); and a request that ends in an error before its
write checked the token is refused if the lookup refuses it (``checked_by_reservation``), so an
answer of any kind is given only to a token that is live."""

from functools import wraps

from ninja.errors import AuthenticationError
from ninja.security import HttpBearer

from ledger.core import privacy, roles
from ledger.core.accounts import TokenChanged, authenticate_token, cached_token, forget_token
from ledger.models import Role, Scope
from opsconsole.api.answers import MissingScope
from opsconsole.api.problems import ApiProblem


class WorkspaceToken(HttpBearer):
    """A live token of a workspace holding ``scope``; sets on the request who acts and where."""

    def __init__(self, scope: Scope, *, cached: bool = False):
        super().__init__()
        self.scope = Scope(scope)
        # Only for routes whose every write, and every answer, checks the token (checked_by_reservation).
        self.cached = cached

    def __call__(self, request):
        # As ninja's HttpBearer, but the header read from META: ``request.headers`` builds a map of
        # every header at its first use, the largest cost of an API request's middleware.
        scheme, _, token = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        if not scheme or scheme.lower() != self.openapi_scheme:
            return None
        return self.authenticate(request, token)

    def authenticate(self, request, token):
        api_token = cached_token(token) if self.cached else None
        # A token the cache does not know, or whose cached scopes refuse: the database says.
        if api_token is None or self.scope not in api_token.scopes:
            api_token = authenticate_token(token)
        if api_token is None:
            return None
        # The token as cached, for the reservation to check (None: read just now).
        request.token_recheck = api_token.recheck  # type: ignore[attr-defined]
        request.token_scope = self.scope
        request.bearer = token
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


# Intake's routes and the claim's take a token from the process's cache: their writes check it (above).
EVENTS, CLAIMING = WorkspaceToken(Scope.EVENTS, cached=True), WorkspaceToken(Scope.CLAIMS, cached=True)
CLAIMS, READ = WorkspaceToken(Scope.CLAIMS), WorkspaceToken(Scope.READ)
OPERATE, APPROVE = WorkspaceToken(Scope.OPERATE), WorkspaceToken(Scope.APPROVE)


def checked_by_reservation(view):
    """``view`` (a route authenticated by ``EVENTS`` or ``CLAIMING``, writing through ``reserving``),
    answered only to a token that is live: if it fails before its write checked a cached token, the
    token is looked up first, and a token the lookup refuses is refused as any route refuses it."""

    @wraps(view)
    def checked(request, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        except Exception:
            if request.token_recheck is not None:
                _look_up_again(request)
            raise

    return checked


def reserving(request, reserve):
    """``reserve(token)``, intake's call (or a claim's, a report's) given the cached token's
    ``recheck`` (None: read just now); when it finds that token changed (``TokenChanged``: nothing
    written), the token is looked up as any route's is, and ``reserve`` called again with what the
    token is now (it reads the request's workspace and person when called), or the request refused
    as the lookup refuses it."""
    try:
        done = reserve(request.token_recheck)
    except TokenChanged:
        forget_token(request.bearer)
        _look_up_again(request)
        return reserve(None)
    request.token_recheck = None  # checked, in the write's own statement
    return done


def _look_up_again(request) -> None:
    """The request's token read from the database (as its route's authentication would without a
    cache), its refusals raised as a route's authentication raises them."""
    api_token = WorkspaceToken(request.token_scope).authenticate(request, request.bearer)
    if api_token is None:
        raise AuthenticationError()
    request.auth = api_token


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
