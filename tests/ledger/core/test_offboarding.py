"""Offboarding revokes: a person's API tokens work only while the person is active and still a
member of the token's workspace. Removing the membership or deactivating the person revokes their
tokens in the same transaction, audited; and the API checks both at every use, however the
person left. A machine's token (no person) is not touched.

Every token here is issued the way an operator does (``manage.py token issue --user``), and every
person leaves through an entry point people use: ``manage.py member remove|deactivate``, the
admin, or (for the check at use) a plain write that no service saw.
"""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger.core.accounts import authenticate_token
from ledger.models import ApiToken, AuditEvent, Delivery, Membership, Operation, Workspace

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def run(command: str, *args) -> list[str]:
    out = StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue().splitlines()


def issue_token(username: str | None = None, workspace: str = "demo") -> str:
    return run("token", "issue", workspace, "--name", "laptop", *(["--user", username] if username else []))[-1]


def post_event(client, token: str, request_id: str = "R-7"):
    body = {"action": "issue-refund", "data": REFUND | {"request_id": request_id}}
    return client.post(
        "/api/v1/events", json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


def post_batch(client, token: str, request_id: str = "R-8"):
    body = {"events": [{"action": "issue-refund", "data": REFUND | {"request_id": request_id}}]}
    return client.post(
        "/api/v1/events/batch", json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


def get_operation(client, token: str, key: str):
    return client.get(f"/api/v1/operations/{key}", HTTP_AUTHORIZATION=f"Bearer {token}")


def answers(client, token: str, key: str) -> tuple[int, int, int]:
    """What the three endpoints answer ``token``: (POST /events, POST /events/batch, GET /operations/key)."""
    return (
        post_event(client, token, "R-9").status_code,
        post_batch(client, token, "R-10").status_code,
        get_operation(client, token, key).status_code,
    )


@pytest.fixture
def pat(person):
    """An approver of demo, with a token of her own that works."""
    return person("pat", "approver")


@pytest.fixture
def pats_token(pat):
    return issue_token("pat")


@pytest.fixture
def pats_refund(client, pats_token) -> Operation:
    response = post_event(client, pats_token)
    assert response.status_code == 201, response.json()
    return Operation.objects.get(pk=response.json()["operation"]["id"])


def revoked_events(username: str) -> list[tuple[str, str, str]]:
    return [
        (event.actor, event.workspace.slug, event.message)
        for event in AuditEvent.objects.filter(kind="token_revoked").select_related("workspace").order_by("id")
        if username in event.message
    ]


# --- member remove ------------------------------------------------------------------------------


def test_member_remove_revokes_the_persons_tokens_and_says_how_many(client, workspace, pat, pats_token, pats_refund):
    second = issue_token("pat")
    assert answers(client, second, pats_refund.key) == (201, 200, 200)

    lines = run("member", "remove", "demo", "pat")

    assert lines == ["pat is no longer a member of demo; 2 API tokens of theirs revoked."]
    assert answers(client, pats_token, pats_refund.key) == (401, 401, 401)
    assert answers(client, second, pats_refund.key) == (401, 401, 401)
    assert ApiToken.objects.filter(user=pat, revoked_at__isnull=True).count() == 0
    assert revoked_events("pat") == [
        ("cli", "demo", f"laptop {pats_token[:8]}: pat is no longer a member of demo"),
        ("cli", "demo", f"laptop {second[:8]}: pat is no longer a member of demo"),
    ]
    removed = AuditEvent.objects.get(kind="member_removed")
    assert removed.message == "pat (2 API tokens revoked)"


def test_a_refused_token_records_nothing(client, workspace, pat, pats_token, pats_refund):
    """The 401 comes before intake: no delivery, no operation, nobody recorded as submitting."""
    run("member", "remove", "demo", "pat")
    deliveries = Delivery.objects.count()

    assert post_event(client, pats_token, "R-11").status_code == 401

    assert Delivery.objects.count() == deliveries
    assert not Operation.objects.filter(key__contains="R-11").exists()


def test_member_remove_leaves_the_persons_tokens_of_other_workspaces(client, workspace, person):
    call_command("create_workspace", "other", stdout=StringIO())
    person("pat", "operator", workspaces=("demo", "other"))
    demo_token, other_token = issue_token("pat", "demo"), issue_token("pat", "other")

    assert run("member", "remove", "other", "pat") == [
        "pat is no longer a member of other; 1 API token of theirs revoked."
    ]

    assert post_event(client, demo_token).status_code == 201
    assert post_event(client, other_token).status_code == 401


def test_member_remove_of_a_person_without_tokens_says_none(workspace, person):
    person("quinn", "viewer")

    assert run("member", "remove", "demo", "quinn") == ["quinn is no longer a member of demo; no API tokens to revoke."]


def test_a_machine_token_is_not_touched(client, workspace, token, pat, pats_token, pats_refund):
    machine = issue_token()

    run("member", "remove", "demo", "pat")
    run("member", "deactivate", "pat")

    assert post_event(client, token, "R-20").status_code == 201
    assert answers(client, machine, pats_refund.key) == (201, 200, 200)


# --- deactivation -------------------------------------------------------------------------------


def test_member_deactivate_revokes_every_token_of_the_person(client, workspace, pat, pats_token, pats_refund):
    call_command("create_workspace", "other", stdout=StringIO())
    Membership.objects.create(user=pat, workspace=Workspace.objects.get(slug="other"), role="viewer")
    other_token = issue_token("pat", "other")

    lines = run("member", "deactivate", "pat")

    assert lines == ["pat is deactivated (can no longer log in); 2 API tokens of theirs revoked."]
    pat.refresh_from_db()
    assert not pat.is_active
    assert answers(client, pats_token, pats_refund.key) == (401, 401, 401)
    assert post_event(client, other_token).status_code == 401
    assert revoked_events("pat") == [
        ("cli", "demo", f"laptop {pats_token[:8]}: pat was deactivated"),
        ("cli", "other", f"laptop {other_token[:8]}: pat was deactivated"),
    ]
    deactivated = AuditEvent.objects.get(kind="person_deactivated")
    assert (deactivated.actor, deactivated.workspace, deactivated.message) == (
        "cli",
        None,
        "pat (2 API tokens revoked)",
    )


def test_reactivating_a_person_does_not_bring_their_tokens_back(client, workspace, pat, pats_token, pats_refund):
    run("member", "deactivate", "pat")
    pat.is_active = True
    pat.save()

    assert answers(client, pats_token, pats_refund.key) == (401, 401, 401)


def test_member_deactivate_refuses_an_unknown_person(workspace):
    with pytest.raises(CommandError, match="No active user 'ghost'."):
        run("member", "deactivate", "ghost")


def test_unticking_active_in_the_admin_revokes_the_persons_tokens(
    admin_client, client, workspace, pat, pats_token, pats_refund
):
    page = admin_client.get(f"/admin/auth/user/{pat.pk}/change/")
    form = page.context["adminform"].form
    data = {
        name: value
        for name, value in form.initial.items()
        if value is not None and name not in ("password", "groups", "user_permissions", "last_login", "date_joined")
    }
    data |= {
        "date_joined_0": pat.date_joined.strftime("%Y-%m-%d"),
        "date_joined_1": pat.date_joined.strftime("%H:%M:%S"),
    }
    data.pop("is_active")  # an unticked checkbox is absent from the form

    response = admin_client.post(f"/admin/auth/user/{pat.pk}/change/", data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    pat.refresh_from_db()
    assert not pat.is_active
    assert answers(client, pats_token, pats_refund.key) == (401, 401, 401)
    assert revoked_events("pat") == [("admin", "demo", f"laptop {pats_token[:8]}: pat was deactivated")]


def test_the_admin_action_deactivates_and_revokes(admin_client, client, workspace, pat, pats_token, pats_refund):
    response = admin_client.post(
        "/admin/auth/user/", {"action": "deactivate_people", "_selected_action": [pat.pk]}, follow=True
    )

    assert "Deactivated pat; 1 API token revoked." in response.content.decode()
    pat.refresh_from_db()
    assert not pat.is_active
    assert answers(client, pats_token, pats_refund.key) == (401, 401, 401)
    assert revoked_events("pat") == [("admin", "demo", f"laptop {pats_token[:8]}: pat was deactivated")]


def test_deleting_a_membership_in_the_admin_revokes_through_the_service(
    admin_client, client, workspace, pat, pats_token, pats_refund
):
    membership = Membership.objects.get(user=pat)

    response = admin_client.post(f"/admin/ledger/membership/{membership.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not Membership.objects.filter(user=pat).exists()
    assert answers(client, pats_token, pats_refund.key) == (401, 401, 401)
    assert revoked_events("pat") == [("admin", "demo", f"laptop {pats_token[:8]}: pat is no longer a member of demo")]
    assert AuditEvent.objects.get(kind="member_removed").actor == "admin"


# --- the check at use, whatever did not revoke ----------------------------------------------------


def test_a_token_of_a_person_deactivated_behind_the_services_back_is_refused(
    client, workspace, pat, pats_token, pats_refund
):
    """``is_active`` set to False by a shell or another app: nothing revoked the token, and the API
    refuses it anyway while the person is inactive."""
    type(pat).objects.filter(pk=pat.pk).update(is_active=False)

    assert answers(client, pats_token, pats_refund.key) == (401, 401, 401)
    assert ApiToken.objects.get(hint=pats_token[:8]).revoked_at is None


def test_a_token_of_a_person_whose_membership_row_vanished_is_refused(client, workspace, pat, pats_token, pats_refund):
    Membership.objects.filter(user=pat).delete()

    assert answers(client, pats_token, pats_refund.key) == (401, 401, 401)


def test_a_superusers_token_needs_no_membership_while_they_are_active(client, workspace, django_user_model):
    django_user_model.objects.create_superuser("root", password="pw")
    root_token = issue_token("root")

    assert post_event(client, root_token).status_code == 201
    django_user_model.objects.filter(username="root").update(is_superuser=False)
    assert post_event(client, root_token, "R-12").status_code == 401


def test_authenticating_is_one_query(workspace, pat, pats_token, token):
    """The token by its unique hash, joined to its person and their membership of the token's
    workspace (unique on user and workspace): one statement, for a person's token and a machine's."""
    for value in (pats_token, token):
        with CaptureQueriesContext(connection) as queries:
            found = authenticate_token(value)
            assert found.workspace.slug == "demo"
            assert found.user is None or found.user.get_username() == "pat"
        assert len(queries) == 1, [query["sql"] for query in queries]


def test_the_lookup_is_planned_once_per_connection_and_still_sees_each_change(client, workspace, pat, pats_token):
    """The lookup is a prepared statement (PostgreSQL plans it once per connection, not at every
    request): it stays one plan however often it runs, and a plan keeps no answer, so a membership
    removed behind every service's back is seen by the very next request on the same connection."""

    def prepared_lookups() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%%ledger_apitoken t%%'")
            return cursor.fetchone()[0]

    for request_id in ("R-20", "R-21", "R-22"):
        assert post_event(client, pats_token, request_id).status_code == 201
    assert prepared_lookups() == 1
    Membership.objects.filter(user=pat).delete()
    assert post_event(client, pats_token, "R-23").status_code == 401
    assert prepared_lookups() == 1
