"""Every admin changelist of the ledger costs a fixed number of queries, with its search and
filters, for a superuser and for a staff member of one workspace: with 35 rows in every table, one
query per row (a missing list_select_related) breaks the budget."""

import pytest
from django.contrib import admin
from django.utils import timezone

from ledger.models import (
    ApiToken,
    Approval,
    Attempt,
    AuditEvent,
    Conflict,
    Contribution,
    Control,
    Delivery,
    Heartbeat,
    Membership,
    ReviewDraft,
    Workspace,
)
from tests.ledger.conftest import submit_brief

ROWS = 35
ADMINS = sorted(
    (model._meta.model_name, model_admin)
    for model, model_admin in admin.site._registry.items()
    if model._meta.app_label == "ledger"
)
# Session, user and (a member) memberships; the bounded count and the page with its related rows;
# a filter's choices (the person's workspaces, the audit kinds). Fixed, whatever the rows.
CHANGELIST_QUERIES = 8


@pytest.fixture
def full(workspace, django_user_model):
    """ROWS rows in every ledger table, in "demo" (written directly, test setup only, except the
    operations, their deliveries and audit events, which intake writes)."""
    operations = [submit_brief(workspace, request_id=f"R-{number}") for number in range(ROWS)]
    people = django_user_model.objects.bulk_create([django_user_model(username=f"p{n}") for n in range(ROWS)])
    workspaces = Workspace.objects.bulk_create([Workspace(slug=f"w{n}") for n in range(ROWS)])
    now = timezone.now()
    deliveries = Delivery.objects.bulk_create(
        [Delivery(workspace=workspace, operation=op, source="api", outcome="conflict", key=op.key) for op in operations]
    )
    Conflict.objects.bulk_create(
        [
            Conflict(operation=op, delivery=d, incoming_fingerprint="f", incoming_payload={}, differences=[])
            for op, d in zip(operations, deliveries, strict=True)
        ]
    )
    Attempt.objects.bulk_create(
        [Attempt(operation=op, number=1, fencing_token=1, started_at=now, outcome="ok") for op in operations]
    )
    ReviewDraft.objects.bulk_create(
        [ReviewDraft(operation=op, workspace=workspace, title="t", owner="ops") for op in operations]
    )
    Approval.objects.bulk_create(
        [Approval(operation=op, fingerprint="f", decision="approved", approver="a") for op in operations]
    )
    Contribution.objects.bulk_create(
        [
            Contribution(operation=op, user=person, kind="submitted")
            for op, person in zip(operations, people, strict=True)
        ]
    )
    ApiToken.objects.bulk_create(
        [ApiToken(workspace=workspace, user=person, token_hash=f"h{person.pk}", hint="oc_") for person in people]
    )
    Membership.objects.bulk_create(
        [Membership(workspace=w, user=person, role="viewer") for w, person in zip(workspaces, people, strict=True)]
    )
    Control.objects.bulk_create([Control(workspace=w, paused=True, reason="r") for w in workspaces])
    Heartbeat.objects.bulk_create([Heartbeat(name=f"job-{n}", beat_at=now) for n in range(ROWS)])
    assert AuditEvent.objects.filter(operation__isnull=False).count() >= ROWS
    return operations


@pytest.fixture(params=["superuser", "member"])
def staff(request, client, workspace, django_user_model):
    """A superuser, or a staff admin of "demo" only (whose lists are narrowed: other queries). No
    passwords: hashing one costs more than the test."""
    if request.param == "superuser":
        user = django_user_model.objects.create_superuser("root", email=None, password=None)
    else:
        user = django_user_model.objects.create_user("staff", is_staff=True)
        Membership.objects.create(user=user, workspace=workspace, role="admin")
    client.force_login(user)
    return user


def variants(model_name: str, model_admin, workspace) -> list[dict]:
    """The changelist, its search, and its filters."""
    queries = [{}]
    if model_admin.search_fields:
        queries.append({"q": "R-1"})
    filters = {
        "operation": {"state__exact": "pending", "action": "prepare-brief"},
        "delivery": {"outcome__exact": "conflict", "workspace__id__exact": workspace.pk},
        "auditevent": {"kind": "reserved"},
        "attempt": {"outcome__exact": "ok"},
        "membership": {"role__exact": "viewer"},
    }
    if model_name in filters:
        queries.append(filters[model_name])
    return queries


@pytest.mark.slow
def test_every_changelist_costs_a_fixed_number_of_queries(
    client, full, staff, workspace, django_assert_max_num_queries, monkeypatch
):
    # The registry's look for changed HTTP actions (one query every few seconds per process) is not a page's cost.
    monkeypatch.setattr("ledger.integrations.configured.Loaded.REFRESH_SECONDS", float("inf"))
    for model_name, model_admin in ADMINS:
        if model_name == "membership" and not staff.is_superuser:
            continue  # superusers manage members (test_tenancy.py)
        for query in variants(model_name, model_admin, workspace):
            with django_assert_max_num_queries(CHANGELIST_QUERIES, info=f"{model_name} {query}"):
                response = client.get(f"/admin/ledger/{model_name}/", query)
            assert response.status_code == 200, (model_name, query)


def test_its_lists_hold_enough_rows_for_an_n_plus_1_to_show(client, full, django_user_model):
    """The budget above means something only if each list shows more rows than it allows queries."""
    client.force_login(django_user_model.objects.create_superuser("root", email=None, password=None))
    for model_name in [
        "operation",
        "delivery",
        "conflict",
        "auditevent",
        "reviewdraft",
        "attempt",
        "approval",
        "contribution",
        "apitoken",
        "membership",
        "control",
        "heartbeat",
    ]:
        response = client.get(f"/admin/ledger/{model_name}/")
        assert len(response.context["cl"].result_list) >= ROWS > CHANGELIST_QUERIES, model_name
