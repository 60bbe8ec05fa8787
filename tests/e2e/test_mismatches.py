"""A person finds what the reconciliation audit found, from the Needs attention page, and decides
one; then works a list too long for one page: filters it, selects all N matching and acknowledges
them with a reason, and looks the missing records up at the destination before anything is resent."""

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone
from playwright.sync_api import expect

from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import BulkAction
from ledger.people import bulk_actions
from reconciliation.models import Mismatch
from reconciliation.two_way_audit import RESET_MIN_OPERATIONS, run_audit
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
    screenshot(page, "mismatches-three-kinds")
    missing = page.get_by_role("row", name="Missing at destination")
    # Nothing is resent before the destination is asked: Replay waits for a lookup's "absent".
    missing.get_by_text("Decide this one").click()
    expect(missing.get_by_role("button", name="Replay")).to_have_count(0)
    expect(missing).to_contain_text("Replay is offered once a lookup confirms the record absent")

    unknown.get_by_text("Decide this one").click()
    unknown.get_by_label("Reason").fill("a test record someone made by hand")
    unknown.get_by_role("button", name="Acknowledge").click()

    expect(page.get_by_text("Acknowledged mismatch")).to_be_visible()
    expect(rows).to_have_count(2)


@pytest.fixture
def long_list(workspace, standin):
    """Ten minutes ago three requests succeeded at the stand-in and two of their records vanished;
    60 records nobody sent appeared. The audit has run: 62 mismatches, more than a page."""
    with time_machine.travel(timezone.now() - timedelta(minutes=10)):
        operations = [
            submit_event(
                workspace=workspace,
                raw=external_event("file-ticket", delivery_id=f"d-{n}", request_id=f"R-{n}"),
                source="api",
            ).operation
            for n in range(3)
        ]
        process_due_operations(worker="w1")
        for operation in operations:
            operation.refresh_from_db()
        for operation in operations[:2]:
            standin.http.post("/_delete", json={"id": operation.external_id}).raise_for_status()
        for n in range(STRANGERS):
            standin.create(f"demo:S-{n}:v1:send-notice", {"summary": "Not ours", "owner": "ops"})
    run = run_audit(since=timezone.now() - timedelta(hours=1))
    assert (run.missing_at_destination, run.unknown_to_ledger) == (2, STRANGERS)
    return operations


STRANGERS = 60


def test_an_operator_filters_selects_all_matching_acknowledges_and_looks_up_the_missing(page, long_list, standin):
    make_user("operator", OPERATOR)
    log_in(page, "operator", "/console/mismatches/")

    counts = page.get_by_role("navigation", name="Counts by kind")
    expect(counts.get_by_role("link", name="Unknown to ledger")).to_contain_text(str(STRANGERS))
    expect(counts.get_by_role("link", name="Missing at destination")).to_contain_text("2")
    expect(page.locator("#mismatch-count")).to_have_text(f"{STRANGERS + 2} open mismatches")

    page.get_by_label("Kind", exact=True).select_option("unknown_to_ledger")
    page.get_by_label("Action").select_option("send-notice")
    with page.expect_navigation():
        page.get_by_role("button", name="Filter").click()
    expect(page.locator("#mismatch-count")).to_have_text(f"{STRANGERS} open mismatches match the filter")
    expect(page.locator("tbody tr")).to_have_count(50)  # a page; the rest are on the next

    page.get_by_label(f"Select all {STRANGERS} matching").check()
    expect(page.get_by_label("Select all on this page")).to_be_checked()
    page.get_by_label("Reason (kept with each decision").fill("test records the vendor's sandbox made")
    screenshot(page, "mismatches-select-all")
    with page.expect_navigation():
        page.get_by_role("button", name="Acknowledge selected").click()

    expect(page.get_by_text(f"Acknowledged {STRANGERS} mismatches: each is audited.")).to_be_visible()
    expect(page.get_by_text("No open mismatch matches the filter.")).to_be_visible()
    assert Mismatch.objects.filter(kind="unknown_to_ledger", status="acknowledged").count() == STRANGERS

    page.goto("/console/mismatches/?kind=missing_at_destination")
    expect(page.locator("tbody tr")).to_have_count(2)
    page.get_by_label("Select all on this page").check()
    creates = standin.requests()
    with page.expect_navigation():
        page.get_by_role("button", name="Look up selected at the destination").click()
    expect(page.get_by_text("Looking up 2 records at the destination by key: nothing is sent.")).to_be_visible()
    expect(page.locator("#bulk-progress")).to_contain_text("0/2")

    bulk_actions.run_bulk_action(BulkAction.objects.get().pk)  # the worker's task

    expect(page.locator("#bulk-progress")).to_contain_text("2/2 done: 2 answered (found or absent), 0 not answered")
    screenshot(page, "mismatches-lookup-progress")
    assert standin.requests() == creates  # nothing was sent

    page.get_by_role("link", name="« Mismatches").click()
    expect(page.locator("[data-lookup=absent]")).to_have_count(2)
    row = page.get_by_role("row", name="Missing at destination").first
    row.get_by_text("Decide this one").click()
    expect(row.get_by_role("button", name="Replay (confirmed absent)")).to_be_visible()
    screenshot(page, "mismatches")

    page.set_viewport_size({"width": 390, "height": 844})
    replay = row.get_by_role("button", name="Replay (confirmed absent)")
    replay.scroll_into_view_if_needed()
    box = replay.bounding_box()
    assert box is not None
    assert box["x"] >= 0
    assert box["x"] + box["width"] <= 390  # on a phone the page does not run off its right edge
    screenshot(page, "narrow-mismatches-looked-up")


def test_a_stand_in_reset_after_successes_is_one_finding_with_dated_windows(page, workspace, standin):
    """25 requests succeeded, then the stand-in restarted empty: the audit raises one "destination
    reset?" finding (not 25 missing records), and the window reads as 24 hours, with its dates."""
    with time_machine.travel(timezone.now() - timedelta(minutes=10)):
        for n in range(RESET_MIN_OPERATIONS + 5):
            submit_event(
                workspace=workspace,
                raw=external_event("send-notice", delivery_id=f"d-{n}", request_id=f"R-{n}"),
                source="api",
            )
        while process_due_operations(worker="w1"):
            pass
    standin.http.post("/_reset").raise_for_status()
    run = run_audit()
    assert (run.destination_reset, run.missing_at_destination) == (1, 0)
    make_user("operator", OPERATOR)
    log_in(page, "operator", "/console/mismatches/")

    rows = page.locator("tbody tr")
    expect(rows).to_have_count(1)
    reset = page.get_by_role("row", name="Destination reset?")
    expect(reset).to_contain_text(
        f"The destination lists none of the {RESET_MIN_OPERATIONS + 5} records the ledger holds for this window"
    )
    since, until = timezone.localtime(run.since), timezone.localtime(run.until)
    expect(reset).to_contain_text(f"{since:%Y-%m-%d %H:%M} – {until:%Y-%m-%d %H:%M}")
    reset.get_by_text("Decide this one").click()
    reset.get_by_label("Reason").fill("the stand-in restarted without its records")
    screenshot(page, "mismatches-reset")
    reset.get_by_role("button", name="Acknowledge").click()
    expect(page.get_by_text("No open mismatch.")).to_be_visible()

    page.goto("/console/dashboard/")
    expect(page.locator("#reconciliation-runs")).to_contain_text(f"{since:%Y-%m-%d %H:%M} – {until:%Y-%m-%d %H:%M}")
