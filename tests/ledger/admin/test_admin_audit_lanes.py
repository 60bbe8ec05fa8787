"""A workspace's audit lanes in the admin: a superuser sets them (audited, as ``manage.py
audit_lanes`` does); nobody else changes them, and a count out of range is refused in words."""

import pytest
from django.contrib import admin
from django.test import RequestFactory

from ledger.models import AuditEvent, Workspace


@pytest.fixture
def root(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", password="pw")
    client.force_login(user)
    return user


def test_a_superuser_sets_a_workspaces_audit_lanes(client, root, workspace):
    response = client.post(f"/admin/ledger/workspace/{workspace.pk}/change/", {"audit_lanes": "4"})

    assert response.status_code == 302, response.content.decode()[:2000]
    assert Workspace.objects.get(pk=workspace.pk).audit_lanes == 4
    changed = AuditEvent.objects.get(kind="audit_lanes_changed")
    assert (changed.actor, changed.message, changed.lane) == ("root", "audit lanes 1 -> 4", 0)


def test_the_admin_refuses_a_lane_count_out_of_range(client, root, workspace):
    response = client.post(f"/admin/ledger/workspace/{workspace.pk}/change/", {"audit_lanes": "65"})

    assert response.status_code == 200
    assert "A workspace has 1 to 64 audit lanes." in response.content.decode()
    assert Workspace.objects.get(pk=workspace.pk).audit_lanes == 1


def test_only_a_superuser_changes_audit_lanes(client, person, workspace):
    admin = person("wsadmin", "admin")
    admin.is_staff = True
    admin.save()
    client.force_login(admin)

    client.post(f"/admin/ledger/workspace/{workspace.pk}/change/", {"audit_lanes": "4"})

    assert Workspace.objects.get(pk=workspace.pk).audit_lanes == 1
    assert not AuditEvent.objects.filter(kind="audit_lanes_changed").exists()


def test_a_workspace_is_neither_added_nor_deleted_and_only_its_lanes_change(admin_user, workspace):
    request = RequestFactory().get("/admin/")
    request.user = admin_user
    model_admin = admin.site.get_model_admin(Workspace)

    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_delete_permission(request, workspace)
    assert model_admin.has_change_permission(request, workspace)
    editable = set(model_admin.get_fields(request, workspace)) - set(
        model_admin.get_readonly_fields(request, workspace)
    )
    assert editable == {"audit_lanes"}
