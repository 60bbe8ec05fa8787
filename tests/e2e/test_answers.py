"""An operator sees what the destination said: the stand-in refuses requests for
three reasons of its own, the failure groups page shows one group per reason with an example of
the answer, and the operation page shows each try's answer: status, code, headers and body."""

import pytest
from playwright.sync_api import expect

from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import Operation
from tests.conftest import external_event
from tests.e2e.conftest import OPERATOR, log_in, make_user, screenshot

pytestmark = pytest.mark.e2e

REFUSALS = [
    ("owner_unknown", "no owner named ops-1 in this tenant"),
    ("owner_unknown", "no owner named ops-7 in this tenant"),
    ("summary_too_long", "summary must be at most 80 characters"),
    ("request_archived", "request R-2 was archived on 2026-11-30"),
]


def refused_operations(workspace, standin) -> list[Operation]:
    standin.fail_next(*[{"kind": "status", "status": 400, "error": code, "detail": said} for code, said in REFUSALS])
    operations = []
    for n in range(len(REFUSALS)):
        raw = external_event("send-notice", f"d-{n}", request_id=f"R-{n}")
        operations.append(submit_event(workspace=workspace, raw=raw, source="api").operation)
        process_due_operations(worker="w1", limit=1)  # one at a time: the faults are taken in order
    return operations


def test_failure_groups_and_attempts_show_the_destinations_own_words(page, workspace, standin):
    make_user("operator", OPERATOR)
    operations = refused_operations(workspace, standin)

    log_in(page, "operator")
    page.goto("/console/failures/")
    rows = page.locator("table.failure-groups tbody tr")
    expect(rows).to_have_count(3)
    first = rows.first
    expect(first).to_contain_text("[owner_unknown]")
    expect(first.locator("td.num")).to_have_text("2")
    first.locator("details.answer summary").click()
    expect(first.locator("pre.answer-body")).to_contain_text('"error": "owner_unknown"')
    expect(first.locator("pre.answer-body")).to_contain_text("in this tenant")
    screenshot(page, "failures")

    page.goto(f"/console/operations/{operations[3].pk}/")
    attempt = page.locator("details.answer")
    expect(attempt).to_have_count(1)
    attempt.locator("summary").click()
    expect(attempt.locator("summary")).to_contain_text("HTTP 400 request_archived")
    expect(attempt.locator("dl.answer-headers")).to_contain_text("application/json")
    expect(attempt.locator("pre.answer-body")).to_contain_text("archived on 2026-11-30")
    attempt.scroll_into_view_if_needed()
    screenshot(page, "operation-answer")
