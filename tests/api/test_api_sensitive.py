"""The API's operation body carries the payload, its sensitive values masked unless the token is a
person's who may see them in the workspace (an approver or admin there)."""

import json

import pytest
from django.db import connection

from ledger.core import accounts
from opsconsole.api.endpoints import api as ninja_api

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}
MASKED = REFUND | {"customer_id": "••••", "amount_cents": "••••"}
KEY = "demo:R-7:v1:issue-refund"
BRIEF = {"request_id": "R-42", "version": 3, "title": "Review renewal options", "owner": "ops"}


@pytest.fixture
def token_of(workspace, person):
    """A token of a person with ``role`` in the demo workspace (no username: a machine's)."""

    def issue(role: str | None = None) -> str:
        user = person(f"{role}-person", role) if role else None
        return accounts.issue_token(workspace=workspace, name=role or "machine", actor="test", user=user)

    return issue


def post(client, token, path, body):
    return client.post(path, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")


def get(client, token, key=KEY):
    return client.get(f"/api/v1/operations/{key}", HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.mark.parametrize("role", [None, "viewer", "operator"])
def test_it_masks_the_sensitive_values_for_a_token_that_may_not_see_them(client, token_of, role):
    token = token_of(role)

    sent = post(client, token, "/api/v1/events", {"action": "issue-refund", "data": REFUND})
    found = get(client, token)

    assert sent.status_code == 201
    assert sent.json()["operation"]["payload"] == MASKED
    assert found.json()["payload"] == MASKED
    assert "C-1001" not in found.content.decode()


@pytest.mark.parametrize("role", ["approver", "admin"])
def test_it_shows_them_to_a_person_who_may(client, token_of, role):
    post(client, token_of(), "/api/v1/events", {"action": "issue-refund", "data": REFUND})

    assert get(client, token_of(role)).json()["payload"] == REFUND


def test_it_masks_them_in_batch_answers_and_conflicts(client, token_of):
    machine, approver = token_of(), token_of("approver")
    post(client, machine, "/api/v1/events", {"action": "issue-refund", "data": REFUND})
    changed = {"action": "issue-refund", "data": REFUND | {"amount_cents": 9900}}

    as_machine = post(client, machine, "/api/v1/events/batch", {"events": [changed]}).json()["results"][0]
    as_approver = post(client, approver, "/api/v1/events/batch", {"events": [changed]}).json()["results"][0]

    assert (as_machine["http_status"], as_machine["fields"]) == (409, ["amount_cents"])
    assert as_machine["operation"]["payload"] == MASKED
    assert as_approver["operation"]["payload"] == REFUND


def test_it_leaves_the_payload_of_an_action_without_sensitive_fields_as_it_is(client, token_of):
    brief = {"request_id": "R-42", "version": 3, "title": "Review renewal options", "owner": "ops"}
    post(client, token_of(), "/api/v1/events", {"action": "prepare-brief", "data": brief})

    assert get(client, token_of(), "demo:R-42:v3:prepare-brief").json()["payload"] == brief


def test_it_documents_the_payload_and_its_mask():
    answer = ninja_api.get_openapi_schema()["components"]["schemas"]["OperationAnswer"]

    assert "payload" in answer["required"]
    assert "••••" in answer["properties"]["payload"]["description"]


def test_the_role_is_read_with_the_token_in_its_one_statement(client, token_of):
    """What the answer reveals is decided by the role the token's statement read: a POST with a token
    this process has not read is that statement and intake's two (the reservation, then its audit
    event sealed in this process); the next, with the token cached, intake's two alone, the
    reservation checking that the token and its role are still what the statement read.
    Nothing more (the test's transaction adds intake's savepoint)."""
    approver = token_of("approver")
    post(client, approver, "/api/v1/events", {"action": "prepare-brief", "data": {**BRIEF, "request_id": "R-41"}})
    accounts.forget_token(approver)
    statements = []

    def count(execute, sql, params, many, context):
        # Counted, not logged (Django's query log would write the refund's values).
        if "SAVEPOINT" not in sql:
            statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        post(client, approver, "/api/v1/events", {"action": "prepare-brief", "data": BRIEF})
    assert len(statements) == 3, statements
    assert "ledger_apitoken" in statements[0]

    statements.clear()
    with connection.execute_wrapper(count):
        sent = post(client, approver, "/api/v1/events", {"action": "issue-refund", "data": REFUND})

    assert len(statements) == 2, statements
    assert "ledger_reserve_one" in statements[0]
    assert sent.json()["operation"]["payload"] == REFUND


def test_a_superusers_token_reveals_them_without_a_membership(client, workspace, django_user_model):
    root = django_user_model.objects.create_superuser("root", password="pw")
    token = accounts.issue_token(workspace=workspace, name="root", actor="test", user=root)

    assert (
        post(client, token, "/api/v1/events", {"action": "issue-refund", "data": REFUND}).json()["operation"]["payload"]
        == REFUND
    )
