"""Time and order in the browser: a replay after the action's configuration changed shows what
changed and goes ahead only once confirmed; latest_wins leaves a superseded version that says so;
the audit trail of a purged operation still reads."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from ledger import retention
from ledger.core import policies
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, Operation
from tests.e2e.conftest import OPERATOR, log_in, make_user, screenshot

pytestmark = pytest.mark.e2e


@pytest.fixture
def operator(db):
    return make_user("operator", OPERATOR)


def submit(workspace, action, **data):
    result = submit_event(workspace=workspace, raw={"action": action, "data": data}, source="api")
    assert result.outcome == "accepted", result
    return result.operation


def test_a_replay_under_a_changed_configuration_needs_confirming(page, workspace, operator, standin):
    standin.fail_next({"kind": "status", "status": 400})
    ticket = submit(workspace, "file-ticket", request_id="T-1", version=1, summary="printer", owner="ops")
    process_due_operations()
    assert Operation.objects.get(pk=ticket.pk).state == "needs_review"
    policies.set_policy(workspace=workspace, action="file-ticket", actor="admin", key_retention=timedelta(days=400))

    log_in(page, "operator")
    page.goto(f"/console/operations/{ticket.pk}/")
    expect(page.get_by_text("The configuration of file-ticket changed since this operation last ran")).to_be_visible()
    expect(page.locator("table.changes")).to_contain_text("policy.key_retention")
    screenshot(page, "replay-config-changed")

    page.get_by_label("Reason").first.fill("ticket system fixed the owner")
    page.get_by_role("button", name="Replay").click()
    expect(page.get_by_role("alert")).to_contain_text("Confirm the replay under the new configuration")
    expect(page.locator(".page-head .badge")).to_have_text("Needs review")

    page.get_by_label("Reason").first.fill("ticket system fixed the owner")
    page.get_by_label(re.compile("Replay under the changed configuration")).check()
    page.get_by_role("button", name="Replay").click()
    expect(page.locator(".page-head .badge")).to_have_text("Pending")
    assert "under a changed configuration: policy.key_retention" in AuditEvent.objects.get(kind="replayed").message


def test_a_superseded_version_and_a_purged_operation_read_plainly(page, workspace, operator):
    older = submit(workspace, "update-status", request_id="R-7", version=1, status="received")
    submit(workspace, "update-status", request_id="R-7", version=2, status="approved")
    brief = submit(workspace, "prepare-brief", request_id="R-9", version=1, title="Renewal", owner="ops")
    process_due_operations()

    log_in(page, "operator")
    page.goto(f"/console/operations/{older.pk}/")
    expect(page.locator(".page-head .badge")).to_have_text("Superseded")
    expect(page.get_by_text("superseded by version 2 (demo:R-7:v2:update-status) before it ran")).to_be_visible()
    screenshot(page, "superseded-version")

    retention.purge(as_of=timezone.now() + timedelta(days=91), vacuum=False)
    page.goto("/console/audit/")
    expect(page.get_by_text(f"#{brief.pk}, purged").first).to_be_visible()
    screenshot(page, "audit-after-purge")


def test_a_superuser_sets_a_retention_policy_in_the_admin(page, workspace):
    make_user("root", is_staff=True, is_superuser=True)
    log_in(page, "root", path="/admin/login/")

    page.goto("/admin/ledger/policy/add/")
    page.get_by_label("Workspace").select_option(label="demo")
    page.get_by_label("Action").select_option("issue-refund")
    page.get_by_label("Payload retention").fill("120 00:00:00")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.get_by_text("would be shorter than the payload window")).to_be_visible()
    screenshot(page, "admin-policy-refused")

    page.get_by_label("Key retention").fill("400 00:00:00")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.get_by_text("was added successfully")).to_be_visible()
    screenshot(page, "admin-policies")
    policies.clear_cache()
    policy = policies.policy_for(workspace.pk, "issue-refund")
    assert (policy.payload_retention.days, policy.key_retention.days) == (120, 400)
    assert AuditEvent.objects.get(kind="policy_changed").actor == "root"
