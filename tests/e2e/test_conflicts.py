"""An operator decides a race's 31 conflicts in one step, from the queue's count to the inbox, and
finds each decision in the audit trail."""

import pytest
from playwright.sync_api import expect

from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import Conflict
from tests.conftest import event
from tests.e2e.conftest import OPERATOR, log_in, make_user, screenshot

pytestmark = pytest.mark.e2e

TITLE = "Review renewal options"


def sent_again(workspace, count: int, *, request_id: str):
    """The request sent once, then ``count`` more times with a changed title each (a sender's retry
    loop editing as it goes), through intake as the API does: one operation, ``count`` conflicts."""
    operation = submit_event(
        workspace=workspace, source="api", raw=event(f"{request_id}-d0", request_id=request_id)
    ).operation
    for number in range(1, count + 1):
        result = submit_event(
            workspace=workspace,
            source="api",
            raw=event(f"{request_id}-d{number}", request_id=request_id, title=f"{TITLE} v{number}"),
        )
        assert result.outcome == "conflict"
    return operation


def test_deciding_a_races_31_conflicts_in_one_step(page, workspace):
    make_user("operator", OPERATOR)
    race = sent_again(workspace, 31, request_id="R-42")
    process_due_operations(worker="w1")  # the operation ran, succeeded: its conflicts still wait for a person
    other = sent_again(workspace, 2, request_id="R-43")

    log_in(page, "operator")
    page.get_by_role("link", name="Open conflicts: 33").click()

    expect(page.get_by_role("heading", name="Conflicts", exact=True)).to_be_visible()
    group = page.locator(f"#operation-{race.pk}")
    expect(group.get_by_role("link", name=race.key)).to_be_visible()
    expect(group.locator(".badge")).to_have_text("Succeeded")
    expect(group.locator(".open-count")).to_have_text("31")
    expect(group.locator("tbody tr")).to_have_count(20)  # the newest 20; the rest are counted
    expect(group).to_contain_text("And 11 more")
    expect(group.locator(f"#conflict-{race.conflicts.order_by('-pk').first().pk}")).to_contain_text(f"{TITLE} v31")
    expect(page.locator(f"#operation-{other.pk}").locator(".open-count")).to_have_text("2")
    screenshot(page, "conflicts-inbox-before")

    group.get_by_label("Reason").fill("the sender's retry loop edited the title; the recorded brief stands")
    group.get_by_role("button", name="Dismiss all 31 conflicts of this operation").click()

    expect(page.get_by_role("status")).to_have_text(
        f"Dismissed 31 conflicts of {race.key}; each decision is in the audit trail."
    )
    expect(page.locator(f"#operation-{race.pk}")).to_have_count(0)
    expect(page.locator(f"#operation-{other.pk}").locator(".open-count")).to_have_text("2")
    screenshot(page, "conflicts-inbox-after")
    assert set(race.conflicts.values_list("status", "decided_by")) == {("dismissed", "operator")}
    assert Conflict.objects.filter(status="open").count() == 2

    page.get_by_role("link", name="Audit").click()
    page.get_by_label("Kind").select_option("conflict_dismissed")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("tbody tr")
    expect(rows).to_have_count(31)
    expect(rows.filter(has_text="the recorded brief stands")).to_have_count(31)
    expect(rows.filter(has_text="operator")).to_have_count(31)
    screenshot(page, "conflicts-audit-trail")


def test_applying_one_and_dismissing_a_selection_across_operations(page, workspace):
    """The buttons and checkboxes placed in the rows belong to their forms (HTML's form attribute):
    "Apply this one" takes its group's reason; ticks in any group go with the selection's."""
    make_user("operator", OPERATOR)
    first = sent_again(workspace, 3, request_id="R-1")
    second = sent_again(workspace, 2, request_id="R-2")
    third = sent_again(workspace, 2, request_id="R-3")
    chosen = first.conflicts.get(delivery__sender_delivery_id="R-1-d2")

    log_in(page, "operator")
    page.goto("/console/conflicts/")
    group = page.locator(f"#operation-{first.pk}")
    group.get_by_label("Reason").fill("the sender's second correction is the right one")
    group.locator(f"#conflict-{chosen.pk}").get_by_role("button", name="Apply this one").click()

    expect(page.get_by_role("status")).to_contain_text(
        f"Applied the incoming payload of conflict {chosen.pk} to {first.key}. Dismissed 2 conflicts"
    )
    expect(page.locator(f"#operation-{first.pk}")).to_have_count(0)
    first.refresh_from_db()
    assert first.payload["title"] == f"{TITLE} v2"

    page.get_by_label(f"Select every open conflict of {second.key}").check()
    newest_of_third = third.conflicts.order_by("-pk").first()
    page.get_by_label(f"Select conflict {newest_of_third.pk}").check()
    screenshot(page, "conflicts-inbox-selection")
    page.get_by_role("form", name="Dismiss the selected conflicts").get_by_label("Reason").fill("test sends")
    page.get_by_role("button", name="Dismiss the selected conflicts").click()

    expect(page.get_by_role("status")).to_have_text(
        f"Dismissed 3 conflicts of {second.key}, {third.key}; each decision is in the audit trail."
    )
    expect(page.locator(f"#operation-{second.pk}")).to_have_count(0)
    expect(page.locator(f"#operation-{third.pk}").locator(".open-count")).to_have_text("1")
    assert list(Conflict.objects.filter(status="open").values_list("operation_id", flat=True)) == [third.pk]
