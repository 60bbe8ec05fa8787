"""Workspace API tokens from the command line: issued once, listed by hint, revoked for good."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ledger.models import ApiToken, AuditEvent
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
        (["scopes", "demo", "oc_nope", "read"], "No live token 'oc_nope' in workspace demo."),
        (["issue", "demo", "--scopes", "read,approve"], "Only a person's token can have the approve scope"),
        (["issue", "demo", "--scopes", "read,sudo"], "Unknown scope 'sudo'"),
        (["issue", "demo", "--scopes", ","], "A token needs at least one scope."),
    ],
)
def test_it_refuses_what_it_cannot_find(workspace, args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert not AuditEvent.objects.filter(kind="token_revoked").exists()


# --- scopes -------------------------------------------------------------------------------------------


def test_it_issues_a_token_with_the_scopes_asked_for_and_lists_them(client, workspace):
    token = run("issue", "demo", "--name", "pager", "--scopes", "read, operate")[-1]

    assert ApiToken.objects.get(hint=token[:8]).scopes == ["read", "operate"]
    (line,) = [line for line in run("list", "demo") if line.startswith(token[:8])]
    assert "read,operate" in line
    refused = client.post(
        "/api/v1/events", event(), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert (refused.status_code, refused.json()["scope"]) == (403, "events")


def test_without_scopes_a_token_does_what_every_token_did_before(workspace):
    token = run("issue", "demo")[-1]

    assert ApiToken.objects.get(hint=token[:8]).scopes == ["events", "claims", "read"]


def test_it_gives_a_persons_token_the_approve_scope(workspace, person):
    person("ann", "approver")

    token = run("issue", "demo", "--user", "ann", "--scopes", "read,approve")[-1]

    assert ApiToken.objects.get(hint=token[:8]).scopes == ["read", "approve"]


def test_it_changes_a_live_tokens_scopes_audited(workspace, token):
    said = run("scopes", "demo", token[:8], "events,read,operate")
    again = run("scopes", "demo", token[:8], "operate,read,events")

    assert said == [f"{token[:8]} (initial) of demo now has the scopes events, read, operate."]
    assert again == [f"{token[:8]} (initial) of demo already had the scopes events, read, operate."]
    changed = AuditEvent.objects.get(kind="token_scopes_changed")
    assert (changed.actor, changed.message) == (
        "cli",
        f"initial {token[:8]}: events, claims, read -> events, read, operate",
    )


def test_it_refuses_approve_on_a_machines_token_and_changes_nothing(workspace, token):
    with pytest.raises(CommandError, match="only people approve"):
        run("scopes", "demo", token[:8], "read,approve")

    assert ApiToken.objects.get().scopes == ["events", "claims", "read"]
    assert not AuditEvent.objects.filter(kind="token_scopes_changed").exists()


def test_an_issued_token_is_said_with_its_owner_and_scopes_before_its_value(workspace):
    lines = run("issue", "demo", "--name", "n8n", "--scopes", "read,claims")

    assert lines[:-1] == [
        "New API token for workspace demo, a machine's (no person behind it), with the scopes claims, read.",
        "It is shown this once: store it now.",
    ]
    assert lines[-1].startswith("oc_")


def test_a_misspelt_scope_is_answered_with_the_one_meant(workspace):
    with pytest.raises(CommandError) as refused:
        run("issue", "demo", "--scopes", "claim,reed,sudo")
    assert str(refused.value) == (
        "Unknown scopes 'claim', 'reed', 'sudo' (did you mean claims, read?); "
        "the scopes are events, claims, read, operate, approve."
    )
