"""The ledger in the admin: visible, searchable, and read-only even for a superuser."""

import html

import pytest
from django.apps import apps
from django.contrib import admin
from django.test import RequestFactory

from ledger.intake import submit
from ledger.models import AuditEvent, Delivery, Operation
from tests.conftest import event

# Membership, Policy, Source, Destination, HttpAction and Subscription are the tables people manage in
# the admin (test_tenancy.py, test_policy_admin below, test_sources.py, test_configured_actions_admin.py,
# test_subscriptions.py); an API token's scopes, and nothing else of it, a superuser sets there
# (tests/api/test_token_scopes.py), and a workspace's audit lanes (test_admin_audit_lanes.py).
LEDGER_MODELS = [
    model
    for model in apps.get_app_config("ledger").get_models()
    if model.__name__
    not in ("Membership", "Policy", "Source", "Destination", "HttpAction", "Subscription", "ApiToken", "Workspace")
]


@pytest.fixture
def superuser_request(admin_user):
    request = RequestFactory().get("/admin/")
    request.user = admin_user
    return request


@pytest.fixture
def r42(workspace):
    return submit.submit_event(workspace=workspace, raw=event(), source="api").operation


@pytest.mark.parametrize("model", LEDGER_MODELS, ids=[m.__name__ for m in LEDGER_MODELS])
def test_it_registers_every_ledger_model_read_only(model, superuser_request, r42):
    assert admin.site.is_registered(model)
    model_admin = admin.site.get_model_admin(model)
    assert model_admin.has_view_permission(superuser_request)
    assert not model_admin.has_add_permission(superuser_request)
    assert not model_admin.has_change_permission(superuser_request)
    assert not model_admin.has_delete_permission(superuser_request)
    instance = model.objects.first()
    if instance is not None:
        assert not model_admin.has_change_permission(superuser_request, instance)
        assert not model_admin.has_delete_permission(superuser_request, instance)


def test_an_api_token_is_neither_added_nor_deleted_and_only_its_scopes_change(superuser_request, workspace):
    from ledger.models import ApiToken

    model_admin = admin.site.get_model_admin(ApiToken)
    api_token = ApiToken.objects.get()

    assert not model_admin.has_add_permission(superuser_request)
    assert not model_admin.has_delete_permission(superuser_request, api_token)
    assert model_admin.has_change_permission(superuser_request, api_token)
    editable = set(model_admin.get_fields(superuser_request, api_token)) - set(
        model_admin.get_readonly_fields(superuser_request, api_token)
    )
    assert editable == {"scopes"}


def test_it_refuses_the_add_page_and_changes_to_an_operation(admin_client, r42):
    assert admin_client.get("/admin/ledger/operation/add/").status_code == 403
    response = admin_client.post(f"/admin/ledger/operation/{r42.pk}/change/", {"state": "succeeded"})
    assert response.status_code == 403
    assert admin_client.post(f"/admin/ledger/operation/{r42.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Operation.objects.get(pk=r42.pk).state == "pending"


def test_it_shows_an_operation_to_a_superuser(admin_client, r42):
    response = admin_client.get(f"/admin/ledger/operation/{r42.pk}/change/")
    assert response.status_code == 200
    assert "demo:R-42:v3:prepare-brief" in response.content.decode()


def test_it_says_what_the_person_may_decide_in_the_console_and_why_not(client, person, r42):
    operator = person("olga", "operator")
    operator.is_staff = True
    operator.save()
    client.force_login(operator)

    page = html.unescape(client.get(f"/admin/ledger/operation/{r42.pk}/change/").content.decode())

    assert "<li>Cancel: yes</li>" in page
    assert f"<li>Replay: no: Only an operation that needs review can be replayed; {r42.key} is pending.</li>" in page
    assert (
        f"<li>Approve or reject: no: {r42.key} is pending; only an operation awaiting approval can be decided.</li>"
        in page
    )


def changelist_keys(admin_client, path, q) -> set[str]:
    response = admin_client.get(path, {"q": q})
    assert response.status_code == 200
    return {str(row.key) for row in response.context["cl"].result_list}


def test_it_searches_operations_by_key(admin_client, workspace, r42):
    submit.submit_event(workspace=workspace, raw=event("delivery-2", version=4), source="api")

    assert changelist_keys(admin_client, "/admin/ledger/operation/", "demo:R-42:v4") == {"demo:R-42:v4:prepare-brief"}
    assert changelist_keys(admin_client, "/admin/ledger/operation/", "R-42") == {
        "demo:R-42:v3:prepare-brief",
        "demo:R-42:v4:prepare-brief",
    }
    assert changelist_keys(admin_client, "/admin/ledger/operation/", "R-99") == set()


def test_it_searches_operations_by_request_id(admin_client, workspace, r42):
    """Request 'R:7' is keyed 'R%3A7', so finding it by 'R:7' proves the search reads the request id."""
    other = submit.submit_event(workspace=workspace, raw=event(request_id="R:7"), source="api").operation
    assert "R:7" not in other.key

    assert changelist_keys(admin_client, "/admin/ledger/operation/", "R:7") == {other.key}


def test_it_lists_r42_in_the_operation_changelist_search(admin_client, r42):
    found = admin_client.get("/admin/ledger/operation/", {"q": "R-42"}).content.decode()
    missing = admin_client.get("/admin/ledger/operation/", {"q": "R-99"}).content.decode()
    assert "demo:R-42:v3:prepare-brief" in found
    assert "demo:R-42:v3:prepare-brief" not in missing


def test_it_searches_deliveries_and_audit_events_by_request_id(admin_client, workspace):
    submit.submit_event(workspace=workspace, raw=event(request_id="R:7"), source="api")
    assert Delivery.objects.count() == 1
    assert AuditEvent.objects.filter(operation__isnull=False).count() == 1

    deliveries = admin_client.get("/admin/ledger/delivery/", {"q": "R:7"}).context["cl"].result_list
    audit = admin_client.get("/admin/ledger/auditevent/", {"q": "R:7"}).context["cl"].result_list
    assert len(deliveries) == 1
    assert len(audit) == 1
    assert len(admin_client.get("/admin/ledger/delivery/", {"q": "R:8"}).context["cl"].result_list) == 0


def test_a_superuser_sets_a_policy_in_the_admin_through_the_service(admin_client, workspace):
    from ledger.core import policies
    from ledger.models import Policy

    response = admin_client.post(
        "/admin/ledger/policy/add/",
        {
            "workspace": workspace.pk,
            "action": "issue-refund",
            "payload_retention": "7 00:00:00",
            "key_retention": "400 00:00:00",
            "ordering": "",
            "gap_wait": "",
        },
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    policies.clear_cache()
    assert policies.policy_for(workspace.pk, "issue-refund").payload_retention.days == 7
    assert Policy.objects.get().changed_by == "admin"
    assert AuditEvent.objects.get(kind="policy_changed").actor == "admin"


def test_the_admin_refuses_a_key_window_shorter_than_the_payload_window(admin_client, workspace):
    from ledger.models import Policy

    response = admin_client.post(
        "/admin/ledger/policy/add/",
        {
            "workspace": workspace.pk,
            "action": "issue-refund",
            "payload_retention": "120 00:00:00",
            "key_retention": "",
            "ordering": "",
            "gap_wait": "",
        },
    )

    assert response.status_code == 200
    assert "would be shorter than the payload window" in response.content.decode()
    assert not Policy.objects.exists()


def test_a_member_who_is_not_a_superuser_cannot_change_a_policy(client, person, workspace):
    from ledger.core import policies

    policies.set_policy(
        workspace=workspace,
        action="send-notice",
        actor="test",
        key_retention=__import__("datetime").timedelta(days=200),
    )
    staff = person("staffer", "admin")
    staff.is_staff = True
    staff.save()
    client.force_login(staff)

    assert client.get("/admin/ledger/policy/").status_code == 200
    assert client.get("/admin/ledger/policy/add/").status_code == 403
