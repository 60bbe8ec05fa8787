"""Workspace API tokens from the command line: issued once, listed by hint, revoked for good."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ledger.models import AuditEvent
from tests.conftest import event


def run(*args) -> list[str]:
    out = StringIO()
    call_command("token", *args, stdout=out)
    return out.getvalue().splitlines()


def test_it_issues_a_working_token_printed_alone_on_the_last_line(client, workspace):
    token = run("issue", "demo", "--name", "crm-webhooks")[-1]

    response = client.post(
        "/api/v1/events", event(), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )

    assert response.status_code == 201
    assert any(line.startswith(token[:8]) and line.endswith("crm-webhooks") for line in run("list", "demo"))


def test_it_revokes_a_token_so_the_api_refuses_it(client, workspace, token):
    lines = run("revoke", "demo", token[:8])

    response = client.post(
        "/api/v1/events", event(), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert lines == [f"Revoked {token[:8]} (initial) of demo."]
    assert response.status_code == 401
    assert "revoked" in run("list", "demo")[0]
    assert AuditEvent.objects.filter(kind="token_revoked", actor="cli").count() == 1


def test_it_names_the_token_that_submitted_a_delivery(api, token):
    api.post("/api/v1/events", event())
    assert AuditEvent.objects.get(kind="reserved").actor == f"token:{token[:8]}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["revoke", "demo", "oc_nope"], "No live token 'oc_nope' in workspace demo."),
        (["issue", "nope"], "No workspace 'nope'."),
    ],
)
def test_it_refuses_what_it_cannot_find(workspace, args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert not AuditEvent.objects.filter(kind="token_revoked").exists()
