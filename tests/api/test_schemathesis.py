"""A fuzzing pass over the API as published: schemathesis generates requests from the app's own
OpenAPI document (each action's envelope and data, valid and invalid; every management route's
parameters and body), sends them through the WSGI app with a token holding every scope (an
admin's, so that the decisions are tried, not refused for the role), and checks every answer
against the document: no server error, a documented status, a documented body and content type,
and invalid input refused.

Bounded (a fixed seed, 300 examples per operation and mode) so that it runs with every `make test`; the
case count and the number of server errors are printed at the end of the run (see conftest.py).
"""

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

# Hundreds of generated requests per operation.
pytestmark = pytest.mark.slow

EXAMPLES_PER_OPERATION = 300

CONFIG = {
    "seed": 20260601,
    "generation": {"mode": "all", "max-examples": EXAMPLES_PER_OPERATION},
    "checks": {
        # Invalid input is refused with one of the ledger's documented 4xx answers.
        "negative_data_rejection": {"expected-statuses": ["400", "401", "404", "413", "415", "422"]},
    },
}


# The document the app serves, loaded through its WSGI entry point (it needs no database).
schema = schemathesis.openapi.from_wsgi(
    "/api/v1/openapi.json", get_wsgi_application(), config=schemathesis.Config.from_dict(CONFIG)
)


@pytest.fixture(autouse=True)
def requests_keep_the_test_connection():
    """Requests run in this thread, inside the test's transaction; as Django's own test client
    does, the end of a request must not close that connection."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def every_scope(workspace, person) -> str:
    """A token of the workspace's admin with every scope."""
    from ledger.core import accounts

    admin = person("fuzz-admin", "admin")
    scopes = ["events", "claims", "read", "operate", "approve"]
    return accounts.issue_token(workspace=workspace, name="fuzz", actor="test", user=admin, scopes=scopes)


@schema.parametrize()
@settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_it_answers_every_generated_request_as_documented(case, every_scope, fuzz_tally, log_guard):
    """Every answer is documented (status, content type, body), never a server error; input the
    document calls invalid is refused. Valid-looking data may still be refused (the owner must be one
    of the workspace's, a key may be taken), so acceptance of valid data is not a check here."""
    # Generated sensitive values as short as "view" turn up in log lines by chance (a request path).
    log_guard.min_text = 8
    # A case that makes the token itself invalid (missing, malformed) is sent as generated: ours would
    # make it valid again, and its refusal (401) is what the case tests.
    headers = {} if _mutates_the_token(case) else {"Authorization": f"Bearer {every_scope}"}
    for event in _events_in(case.body):
        _meet_the_unpublished_rules(event)
    response = case.call(headers=headers)
    fuzz_tally.count(response.status_code)
    case.validate_response(response, headers=headers, excluded_checks=[positive_data_acceptance])


def _mutates_the_token(case) -> bool:
    data = case.meta.phase.data if case.meta is not None else None
    mutations = getattr(data, "mutations", None) or ()
    parameters = {getattr(data, "parameter", None), *(mutation.parameter for mutation in mutations)}
    return "Authorization" in parameters


def _events_in(body) -> list:
    if isinstance(body, dict) and isinstance(body.get("events"), list):
        return body["events"]
    return [body]


def _meet_the_unpublished_rules(event) -> None:
    """A rule the document cannot state makes most generated events invalid: the owner must be one
    of the workspace's approved owners (data the document cannot know). A valid owner becomes
    ``ops``, so that valid events are accepted (or duplicates, or conflicts) and the writes behind
    them exercised. A value the schema calls invalid is left as it is, so every case keeps its
    validity. (A request id's rules, not blank and no control characters, are published.)"""
    data = event.get("data") if isinstance(event, dict) else None
    if not isinstance(data, dict):
        return
    if isinstance(data.get("owner"), str) and 1 <= len(data["owner"]) <= 100:
        data["owner"] = "ops"
