"""An operator on an operation the destination refused for good: no Mark
succeeded is offered, and pressing Cancel without a reason is answered beside the button, by the
server, not by a browser tooltip far from it."""

import pytest
from playwright.sync_api import expect

from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from tests.conftest import external_event
from tests.e2e.conftest import OPERATOR, log_in, make_user, screenshot

pytestmark = pytest.mark.e2e


def test_a_refused_operation_offers_no_trap_and_says_why_beside_the_button(page, workspace, standin):
    make_user("operator", OPERATOR)
    standin.fail_next({"kind": "status", "status": 400, "error": "owner_unknown", "detail": "no such owner"})
    operation = submit_event(workspace=workspace, raw=external_event("send-notice"), source="api").operation
    process_due_operations(worker="w1")

    log_in(page, "operator")
    page.goto(f"/console/operations/{operation.pk}/")
    actions = page.get_by_role("region", name="Actions")
    expect(actions.get_by_role("button", name="Mark succeeded")).to_have_count(0)

    actions.get_by_role("button", name="Cancel").click()

    error = page.locator("#operation-reason-refused")
    expect(error).to_have_text("Reason is required; nothing was changed.")
    expect(page.get_by_label("Reason")).to_have_attribute(
        "aria-describedby", "operation-reason-refused operation-reason-readers"
    )
    expect(page.locator(".badge.state-needs_review").first).to_be_visible()
    screenshot(page, "operation-refusal-beside")
