"""Token scopes: every route names the scope it needs and refuses a token without it (403, the
scope named, nothing recorded); tokens issued as before, and those of the release before the
scopes, keep doing what they did; a machine's token never gets ``approve``; scopes are changed,
audited, by ``ledger.core.accounts`` (the command and the admin call it)."""

import pytest
from django.db import IntegrityError, connection, transaction

from ledger.core import accounts
from ledger.models import ApiToken, AuditEvent, Delivery, Operation
from opsconsole.api.endpoints import api
from opsconsole.api.tokens import WorkspaceToken
from tests.conftest import event

# The scope each route needs.
SCOPES = {
    ("POST", "/events"): "events",
    ("POST", "/events/batch"): "events",
    ("POST", "/claims"): "claims",
    ("POST", "/claims/batch"): "claims",
    ("GET", "/claims/due"): "claims",
    ("POST", "/claims/{path:key}/heartbeat"): "claims",
    ("POST", "/claims/{path:key}/outcome"): "claims",
    ("GET", "/operations"): "read",
    ("GET", "/operations/{path:key}"): "read",
    ("GET", "/pauses"): "read",
    ("POST", "/pauses"): "operate",
    ("DELETE", "/pauses/{int:pause_id}"): "operate",
    ("POST", "/operations/{path:key}/approve"): "approve",
    ("POST", "/operations/{path:key}/reject"): "approve",
    ("POST", "/operations/{path:key}/replay"): "operate",
    ("POST", "/operations/{path:key}/resolve"): "operate",
    ("POST", "/operations/{path:key}/cancel"): "operate",
    ("POST", "/operations/{path:key}/take"): "operate",
    ("POST", "/operations/{path:key}/release"): "operate",
    ("POST", "/conflicts/{int:conflict_id}/apply"): "operate",
    ("POST", "/conflicts/{int:conflict_id}/dismiss"): "operate",
}


def scoped_routes() -> dict[tuple[str, str], list[str]]:
    """Each route of the API (method, path) and the scopes its authentication asks for."""
    found = {}
    routers = [(prefix, router) for prefix, router in api._routers]
    while routers:
        prefix, router = routers.pop()
        routers += [(prefix + inner, nested) for inner, nested, *_ in router._routers]
        for path, view in router.path_operations.items():
            for operation in view.operations:
                scopes = [auth.scope.value for auth in operation.auth_callbacks if isinstance(auth, WorkspaceToken)]
                for method in operation.methods:
                    found[(method, prefix + path)] = scopes
    return found


def test_every_route_names_the_scope_it_needs():
    """Only the signed webhooks take no token (their signature is their credential)."""
    found = scoped_routes()

    assert found.pop(("POST", "/hooks/{source}")) == []
    assert found == {route: [scope] for route, scope in SCOPES.items()}


def refused_for_scope(response, scope: str) -> None:
    assert response.status_code == 403, response.content
    body = response.json()
    assert (body["status"], body["reason"], body["scope"]) == ("refused", "missing_scope", scope)
    assert f"lacks the {scope} scope" in body["detail"]


def test_submitting_needs_events_and_nothing_is_recorded_without_it(caller, workspace):
    reader = caller(scopes=["read", "claims"])

    refused_for_scope(reader.post("/api/v1/events", event()), "events")
    refused_for_scope(reader.post("/api/v1/events/batch", {"events": [event()]}), "events")

    assert not Delivery.objects.exists()
    assert not Operation.objects.exists()


def test_claiming_needs_claims_and_reading_needs_read(caller, workspace):
    submitter = caller(scopes=["events"])
    submitter.post("/api/v1/events", event())

    refused_for_scope(submitter.post("/api/v1/claims", {"action": "send-invoice", "data": {}}), "claims")
    refused_for_scope(submitter.post("/api/v1/claims/batch", {"claims": []}), "claims")
    refused_for_scope(submitter.post("/api/v1/claims/k/heartbeat", {"token": "t"}), "claims")
    refused_for_scope(submitter.post("/api/v1/claims/k/outcome", {"token": "t"}), "claims")
    refused_for_scope(submitter.get("/api/v1/operations/demo:R-42:v3:prepare-brief"), "read")
    refused_for_scope(submitter.get("/api/v1/operations"), "read")


def test_a_token_issued_as_before_submits_claims_and_reads_but_does_not_operate(api, token, workspace):
    assert ApiToken.objects.get().scopes == ["events", "claims", "read"]
    assert api.post("/api/v1/events", event()).status_code == 201
    assert api.get("/api/v1/operations/demo:R-42:v3:prepare-brief").status_code == 200

    refused_for_scope(api.post("/api/v1/operations/demo:R-42:v3:prepare-brief/cancel", {"reason": "x"}), "operate")


def test_a_token_of_the_release_before_gets_the_scopes_every_token_had(workspace):
    """A process of the release before inserts tokens without the column: the database gives them
    events, claims and read."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ledger_apitoken (workspace_id, name, token_hash, hint, created_at)"
            " VALUES (%s, 'old', %s, 'oc_old00', now()) RETURNING id",
            [workspace.pk, ApiToken.hash("oc_old")],
        )
        (pk,) = cursor.fetchone()

    assert ApiToken.objects.get(pk=pk).scopes == ["events", "claims", "read"]
    assert accounts.authenticate_token("oc_old").scopes == ["events", "claims", "read"]


def test_the_database_refuses_a_scope_it_does_not_know(workspace):
    api_token = ApiToken.objects.get()
    with pytest.raises(IntegrityError, match="apitoken_scopes_valid"), transaction.atomic():
        ApiToken.objects.filter(pk=api_token.pk).update(scopes=["read", "admin"])


@pytest.mark.parametrize(
    ("scopes", "person", "message"),
    [
        (["read", "approve"], False, "Only a person's token can have the approve scope: only people approve."),
        (
            ["read", "everything"],
            True,
            "Unknown scope 'everything'; the scopes are events, claims, read, operate, approve.",
        ),
        ([], True, "A token needs at least one scope."),
    ],
)
def test_it_refuses_scopes_a_token_cannot_have(scopes, person, message):
    with pytest.raises(accounts.BadScopes) as refused:
        accounts.checked_scopes(scopes, person=person)
    assert str(refused.value) == message


def test_changing_a_tokens_scopes_is_audited_and_takes_effect_at_the_next_request(caller, workspace):
    flow = caller(scopes=["read"])
    api_token = ApiToken.objects.get(hint=flow.token[:8])
    refused_for_scope(flow.post("/api/v1/events", event()), "events")

    assert accounts.set_token_scopes(api_token, scopes=["events", "read"], actor="root") is True
    assert accounts.set_token_scopes(api_token, scopes=["read", "events"], actor="root") is False

    assert flow.post("/api/v1/events", event()).status_code == 201
    (changed,) = AuditEvent.objects.filter(kind="token_scopes_changed")
    assert (changed.actor, changed.message) == ("root", f"flow {flow.token[:8]}: read -> events, read")


def test_a_revoked_tokens_scopes_are_not_changed(workspace, token):
    accounts.revoke_token(workspace=workspace, hint=token[:8], actor="test")
    with pytest.raises(accounts.TokenNotFound):
        accounts.set_token_scopes(ApiToken.objects.get(), scopes=["read"], actor="root")


# --- the admin --------------------------------------------------------------------------------------


@pytest.fixture
def root(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", password="pw")
    client.force_login(user)
    return user


def test_a_superuser_sets_a_tokens_scopes_in_the_admin(client, root, workspace):
    api_token = ApiToken.objects.get()

    response = client.post(f"/admin/ledger/apitoken/{api_token.pk}/change/", {"scopes": ["read", "operate"]})

    assert response.status_code == 302, response.content.decode()[:2000]
    api_token.refresh_from_db()
    assert api_token.scopes == ["read", "operate"]
    assert AuditEvent.objects.get(kind="token_scopes_changed").actor == "root"


def test_the_admin_refuses_approve_on_a_machines_token(client, root, workspace):
    api_token = ApiToken.objects.get()

    response = client.post(f"/admin/ledger/apitoken/{api_token.pk}/change/", {"scopes": ["read", "approve"]})

    assert response.status_code == 200
    assert "only people approve" in response.content.decode()
    api_token.refresh_from_db()
    assert api_token.scopes == ["events", "claims", "read"]


def test_only_a_superuser_changes_scopes_in_the_admin(client, person, workspace):
    admin = person("wsadmin", "admin")
    admin.is_staff = True
    admin.save()
    client.force_login(admin)
    api_token = ApiToken.objects.get()

    client.post(f"/admin/ledger/apitoken/{api_token.pk}/change/", {"scopes": ["read"]})

    api_token.refresh_from_db()
    assert api_token.scopes == ["events", "claims", "read"]
