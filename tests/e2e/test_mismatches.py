"""A person finds what the reconciliation audit found, from the Needs attention page, and decides one."""

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone
from playwright.sync_api import expect

from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from reconciliation.two_way_audit import run_audit
from tests.conftest import external_event
from tests.e2e.conftest import OPERATOR, log_in, make_user, screenshot

pytestmark = pytest.mark.e2e


@pytest.fixture
def audited(workspace, standin):
    """Ten minutes ago two requests succeeded at the stand-in; since then one record vanished, one
    was changed, and a record nobody sent appeared. The audit has run."""
    with time_machine.travel(timezone.now() - timedelta(minutes=10)):
        ticket = submit_event(
            workspace=workspace, raw=external_event("file-ticket", request_id="R-1"), source="api"
        ).operation
        notice = submit_event(
            workspace=workspace, raw=external_event("send-notice", delivery_id="d-2", request_id="R-2"), source="api"
        ).operation
        process_due_operations(worker="w1")
        ticket.refresh_from_db()
        notice.refresh_from_db()
        standin.http.post("/_delete", json={"id": ticket.external_id}).raise_for_status()
        standin.http.post(
            "/_edit", json={"id": notice.external_id, "payload": {"summary": "Edited there", "owner": "ops"}}
        ).raise_for_status()
        standin.create("demo:R-9:v1:send-notice", {"summary": "Not ours", "owner": "ops"})
    run = run_audit(since=timezone.now() - timedelta(hours=1))
    assert run.new_mismatches == 3
    return ticket, notice


def test_an_operator_reaches_the_mismatches_from_the_queue_and_acknowledges_one(page, audited):
    ticket, notice = audited
    make_user("operator", OPERATOR)
    log_in(page, "operator")

    page.goto("/console/")
    page.get_by_role("link", name="Reconciliation mismatches").click()

    expect(page.get_by_role("heading", name="Reconciliation mismatches")).to_be_visible()
    rows = page.locator("tbody tr")
    expect(rows).to_have_count(3)
    expect(page.get_by_role("row", name="Missing at destination")).to_contain_text(ticket.key)
    expect(page.get_by_role("row", name="Content differs")).to_contain_text("summary")
    expect(page.get_by_role("row", name="Content differs")).not_to_contain_text("Edited there")
    unknown = page.get_by_role("row", name="Unknown to ledger")
    expect(unknown).to_contain_text("(no operation)")
    expect(page.get_by_role("row", name="Missing at destination").get_by_role("button", name="Replay")).to_be_visible()
    screenshot(page, "mismatches")

    unknown.get_by_label("Reason").fill("a test record someone made by hand")
    unknown.get_by_role("button", name="Acknowledge").click()

    expect(page.get_by_text("Acknowledged mismatch")).to_be_visible()
    expect(rows).to_have_count(2)
