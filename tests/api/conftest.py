"""The API tests' shared fixtures: the fuzzing pass's tally (printed at the end of every test run), and
callers of the management routes with tokens of chosen people and scopes."""

import json
from collections import Counter

import pytest
from schemathesis.pytest.plugin import SchemathesisFunction

# Each generated request's status, kept on its test's report: the tally is summed from the reports,
# so it is whole when pytest-xdist ran the tests in other processes.
STATUS = "schemathesis status"


class FuzzTally:
    def __init__(self, user_properties: list):
        self.user_properties = user_properties

    def count(self, status: int) -> None:
        self.user_properties.append((STATUS, status))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """schemathesis names each operation's test (``test_...[POST /api/v1/events]``) but, under pytest 9,
    gives them all the function's node id: each gets its name back in its id, so that pytest-xdist,
    which tells tests apart by id, runs every one of them."""
    for item in items:
        if isinstance(item, SchemathesisFunction):
            item._id = item.parent.id.child(item.name)


@pytest.fixture
def fuzz_tally(request) -> FuzzTally:
    return FuzzTally(request.node.user_properties)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    statuses = Counter(
        value
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "call"
        for name, value in report.user_properties
        if name == STATUS
    )
    if not statuses:
        return
    server_errors = sum(n for status, n in statuses.items() if status >= 500)
    listed = ", ".join(f"{status}: {n}" for status, n in sorted(statuses.items()))
    terminalreporter.write_sep("-", "schemathesis")
    terminalreporter.write_line(f"schemathesis: {statuses.total()} cases, {server_errors} server errors ({listed})")


# --- the management routes' callers (tests/api/test_decisions.py and the others) ------------------

EVERY_SCOPE = ("events", "claims", "read", "operate", "approve")
MACHINE_SCOPES = ("events", "claims", "read", "operate")


class Caller:
    """A Django test client sending one token's requests, bodies as JSON."""

    def __init__(self, client, token: str):
        self.client, self.token = client, token

    def _auth(self) -> dict:
        return {"HTTP_AUTHORIZATION": f"Bearer {self.token}"}

    def get(self, path: str, **query):
        return self.client.get(path, query, **self._auth())

    def post(self, path: str, body=None, **extra):
        if body is None:  # no body at all, as `curl -X POST` sends
            return self.client.generic("POST", path, **self._auth(), **extra)
        data = body if isinstance(body, str | bytes) else json.dumps(body)
        return self.client.post(path, data, content_type="application/json", **self._auth(), **extra)

    def delete(self, path: str):
        return self.client.delete(path, **self._auth())


@pytest.fixture
def caller(client, workspace):
    """``caller("alice")``: a Caller with a token of alice's (every scope unless ``scopes``);
    ``caller()``: a machine's (every scope a machine may have)."""

    def make(username: str | None = None, scopes=None) -> Caller:
        from django.contrib.auth import get_user_model

        from ledger.core import accounts

        user = get_user_model().objects.get(username=username) if username else None
        scopes = scopes if scopes is not None else (EVERY_SCOPE if user else MACHINE_SCOPES)
        token = accounts.issue_token(workspace=workspace, name="flow", actor="test", user=user, scopes=list(scopes))
        return Caller(client, token)

    return make
