"""Replaying a failure group of 100 operations and watching the progress: 100 notices refused by
their destination (the stand-in) with the same HTTP 400, one group of 100 on the failures page,
Replay all with one reason, and the progress page following the task to 100/100 by itself (the
task is run chunk by chunk from the test, between the browser's looks)."""

import pytest
from playwright.sync_api import expect

from ledger.engine.processing import process_due_operations
from ledger.intake import submit
from ledger.models import AuditEvent, BulkAction, Operation
from ledger.people import bulk_actions
from tests.e2e.conftest import OPERATOR, log_in, make_user, screenshot

pytestmark = pytest.mark.e2e

COUNT = 100


def refused_notices(workspace, standin, count: int) -> list[int]:
    """``count`` send-notice operations whose destination answered HTTP 400 to each: needs review."""
    standin.fail_next(*[{"kind": "status", "status": 400}] * count)
    events = [
        {
            "action": "send-notice",
            "delivery_id": f"d-{n}",
            "data": {"request_id": f"R-{n}", "version": 1, "summary": f"Renewal notice {n}", "owner": "ops"},
        }
        for n in range(count)
    ]
    ids = [result.operation.pk for result in submit.submit_batch(workspace=workspace, raw_events=events, source="cli")]
    while process_due_operations(worker="w1"):
        pass
    states = set(Operation.objects.filter(pk__in=ids).values_list("state", flat=True))
    assert states == {"needs_review"}, states
    return ids


def test_replaying_a_failure_group_of_100_and_watching_the_progress(page, workspace, standin):
    ids = refused_notices(workspace, standin, COUNT)
    make_user("operator", OPERATOR)

    log_in(page, "operator")
    page.get_by_role("link", name="Failure groups").click()
    group = page.get_by_role("row").filter(has_text="HTTP 400 from")
    expect(group).to_contain_text("send-notice")
    expect(group.get_by_role("cell").first).to_have_text(str(COUNT))
    screenshot(page, "failure-groups")

    group.get_by_text(f"Replay or cancel all {COUNT}").click()
    group.get_by_label("Reason").fill("the destination accepts the summary field again")
    with page.expect_navigation():
        group.get_by_role("button", name=f"Replay all {COUNT}").click()
    expect(page.get_by_role("status").filter(has_text=f"Replaying {COUNT} operations")).to_be_visible()
    expect(page.locator("#bulk-progress")).to_contain_text(f"0/{COUNT}")
    bulk = BulkAction.objects.get()
    assert sorted(bulk.operation_ids) == sorted(ids)

    chunks = COUNT // bulk_actions.CHUNK
    bulk_actions.run_bulk_action(bulk.pk, chunks=chunks // 2)
    half = chunks // 2 * bulk_actions.CHUNK
    # No reload: the page asks for its progress again by itself.
    expect(page.locator("#bulk-progress")).to_contain_text(f"{half}/{COUNT}")
    expect(page.locator("progress")).to_have_attribute("value", str(half))
    screenshot(page, "bulk-progress-midway")

    bulk_actions.run_bulk_action(bulk.pk)
    expect(page.locator("#bulk-progress")).to_contain_text(f"{COUNT}/{COUNT}")
    expect(page.locator("#bulk-progress")).to_contain_text(f"{COUNT} replayed, 0 skipped")
    expect(page.locator("#bulk-progress")).not_to_have_attribute("hx-trigger", "every 2s")  # it stopped
    screenshot(page, "bulk-progress-finished")

    assert set(Operation.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"pending"}
    replayed = AuditEvent.objects.filter(kind="replayed", actor="operator")
    assert sorted(replayed.values_list("operation_id", flat=True)) == sorted(ids)  # each audited on its own

    page.locator("#bulk-progress tbody a").first.click()
    expect(
        page.get_by_text(f"replay: the destination accepts the summary field again (bulk replay {bulk.pk})")
    ).to_be_visible()


def test_cancelling_the_rows_ticked_in_the_queue(page, workspace, standin):
    ids = refused_notices(workspace, standin, 3)
    make_user("operator", OPERATOR)

    log_in(page, "operator")
    page.get_by_label("Select all on this page").check()
    page.get_by_label(f"Select {Operation.objects.get(pk=ids[1]).key}").uncheck()
    page.get_by_text("Replay or cancel the selected operations").click()
    page.get_by_label("Reason").fill("the customer withdrew")
    screenshot(page, "queue-selection")
    with page.expect_navigation():
        page.get_by_role("button", name="Cancel selected").click()
    expect(page.locator("#bulk-progress")).to_contain_text("0/2")

    bulk_actions.run_bulk_action(BulkAction.objects.get().pk)

    expect(page.locator("#bulk-progress")).to_contain_text("2/2 done: 2 cancelled, 0 skipped")
    states = dict(Operation.objects.filter(pk__in=ids).values_list("pk", "state"))
    assert [states[pk] for pk in ids] == ["cancelled", "needs_review", "cancelled"]
