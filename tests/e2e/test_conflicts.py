"""The conflicts inbox as a work list: an operator decides a race's 31 conflicts in one step, and a
day's 60 dismiss-only conflicts and 2 held refunds: the held ones first, their amounts masked with
who may decide them (the operator hands one to an approver), the rest dismissed with "dismiss all N
matching"; the approver reads the amounts as money and applies the corrected one. At 1440 and 390 px."""

import os
import shutil

import pytest
from playwright.sync_api import expect

from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, Conflict, Operation
from tests.conftest import event, external_event
from tests.e2e.conftest import APPROVER, OPERATOR, SHOTS, log_in, make_user, screenshot

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
    expect(page.locator(".state-tabs [data-state='held'] .tab-count")).to_have_text("2")
    expect(page.locator(".state-tabs [data-state='dismiss_only'] .tab-count")).to_have_text("31")
    held = page.locator("#held tbody tr")
    expect(held).to_have_count(2)
    expect(held.first).to_contain_text(f"Title: {TITLE} → {TITLE} v2")
    group = page.locator(".action-group")
    expect(group.locator("h3")).to_contain_text("prepare-brief")
    expect(group.locator("tbody tr")).to_have_count(10)  # the newest 10; "See all 31"
    expect(group.locator(f"#conflict-{race.conflicts.order_by('-pk').first().pk}")).to_contain_text(f"{TITLE} v31")
    expect(group.get_by_role("link", name="See all 31 of prepare-brief")).to_be_visible()
    screenshot(page, "conflicts-inbox-before")

    group.get_by_label("Reason").fill("the sender's retry loop edited the title; the recorded brief stands")
    group.get_by_role("button", name="Dismiss all 31 matching").click()

    expect(page.get_by_role("status")).to_have_text(
        f"Dismissed 31 conflicts of {race.key}; each decision is in the audit trail."
    )
    expect(page.locator(".action-group")).to_have_count(0)
    expect(page.locator(".state-tabs [data-state='held'] .tab-count")).to_have_text("2")
    screenshot(page, "conflicts-inbox-after")
    assert set(race.conflicts.values_list("status", "decided_by")) == {("dismissed", "operator")}
    assert set(Conflict.objects.filter(status="open").values_list("operation_id", flat=True)) == {other.pk}

    page.get_by_role("link", name="Audit").click()
    page.get_by_label("Kind").select_option("conflict_dismissed")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("tbody tr")
    expect(rows).to_have_count(31)
    expect(rows.filter(has_text="the recorded brief stands")).to_have_count(31)
    expect(rows.filter(has_text="operator")).to_have_count(31)
    screenshot(page, "conflicts-audit-trail")


def test_applying_one_and_dismissing_a_selection(page, workspace):
    """The apply button of a held row takes its row's reason (and dismisses the operation's other
    open conflicts); ticks in the dismiss-only groups go with the selection's reason."""
    make_user("operator", OPERATOR)
    first = sent_again(workspace, 3, request_id="R-1")
    chosen = first.conflicts.get(delivery__sender_delivery_id="R-1-d2")
    second = sent_again(workspace, 2, request_id="R-2")
    third = sent_again(workspace, 2, request_id="R-3")
    Operation.objects.filter(pk__in=[second.pk, third.pk]).update(state="succeeded", attempts=1)  # ran (setup)

    log_in(page, "operator")
    page.goto("/console/conflicts/")
    row = page.locator(f"#conflict-{chosen.pk}")
    row.get_by_label("Reason").fill("the sender's second correction is the right one")
    row.get_by_role("button", name="Apply incoming").click()

    expect(page.get_by_role("status")).to_contain_text(
        f"Applied the incoming payload of conflict {chosen.pk} to {first.key}. Dismissed 2 conflicts"
    )
    expect(page.locator("#held tbody tr")).to_have_count(0)
    first.refresh_from_db()
    assert first.payload["title"] == f"{TITLE} v2"

    picked = [*second.conflicts.all(), third.conflicts.order_by("-pk").first()]
    for conflict in picked:
        page.get_by_label(f"Select conflict {conflict.pk}").check()
    screenshot(page, "conflicts-inbox-selection")
    page.get_by_role("form", name="Dismiss the selected conflicts").get_by_label("Reason").fill("test sends")
    page.get_by_role("button", name="Dismiss the selected").click()

    expect(page.get_by_role("status")).to_have_text(
        f"Dismissed 3 conflicts of {second.key}, {third.key}; each decision is in the audit trail."
    )
    assert list(Conflict.objects.filter(status="open").values_list("operation_id", flat=True)) == [third.pk]


# --- a day's inbox: 60 dismiss-only conflicts and 2 held refunds -------------------------------------------

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4350, "currency": "EUR"}
DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "console")


def held_refund(workspace, request_id: str, amount: int, corrected: int) -> Operation:
    """A refund sent again with another amount before anyone approved it: held by the conflict."""
    first = REFUND | {"request_id": request_id, "amount_cents": amount}
    for delivery, data in (("d-1", first), ("d-2", first | {"amount_cents": corrected})):
        submit_event(
            workspace=workspace,
            source="api",
            raw={"action": "issue-refund", "delivery_id": f"{request_id}-{delivery}", "data": data},
        )
    operation = Operation.objects.get(key=f"demo:{request_id}:v1:issue-refund")
    assert operation.state == "needs_review"
    return operation


@pytest.fixture
def busy_day(workspace, standin):
    """Two refunds held by a conflict on their amount, and 60 conflicts whose operations ran: 40 of
    prepare-brief (20 requests sent three times), 20 of send-notice (10, to the stand-in)."""
    for number in range(20):
        sent_again(workspace, 2, request_id=f"B-{number}")
    for number in range(10):
        request_id = f"N-{number}"
        for take in range(3):
            submit_event(
                workspace=workspace,
                source="api",
                raw=external_event(
                    "send-notice", f"{request_id}-d{take}", request_id=request_id, summary=f"Notice {take}"
                ),
            )
    process_due_operations(worker="w1")
    assert not Operation.objects.exclude(action="issue-refund").exclude(state="succeeded").exists()
    return [held_refund(workspace, "R-7", 4350, 4351), held_refund(workspace, "R-8", 12000, 12500)]


def keep(name: str) -> None:
    """Copy the screenshot ``name`` (just taken) into docs/console/, where the docs show it."""
    shutil.copy(os.path.join(SHOTS, f"{name}.png"), os.path.join(DOCS, f"{name}.png"))


def test_a_days_conflicts_held_first_handed_to_an_approver_and_the_rest_dismissed(page, busy_day):
    first, second = busy_day
    make_user("operator", OPERATOR)
    approver = make_user("approver", APPROVER)
    page.set_viewport_size({"width": 1440, "height": 900})

    log_in(page, "operator")
    page.goto("/console/conflicts/")
    tabs = page.locator(".state-tabs")
    expect(tabs.locator("[data-state=''] .tab-count")).to_have_text("62")
    expect(tabs.locator("[data-state='held'] .tab-count")).to_have_text("2")
    expect(tabs.locator("[data-state='dismiss_only'] .tab-count")).to_have_text("60")
    held = page.locator("#held tbody tr")
    expect(held).to_have_count(2)
    row = held.filter(has_text=first.key)
    expect(row.locator("td.differences")).to_have_text("Amount: •••• → ••••")
    expect(row).to_contain_text(
        "Only approvers and admins see the Amount; assign it to one of: approver. Or dismiss it: "
        "the recorded payload stays."
    )
    expect(row.get_by_role("button", name="Apply incoming and release")).to_have_count(0)
    expect(row.get_by_role("button", name="Dismiss and release")).to_be_visible()
    groups = page.locator(".action-group")
    expect(groups.locator("h3")).to_have_text(["prepare-brief 40", "send-notice 20"])
    expect(page.get_by_role("button", name="Dismiss all 40 matching")).to_be_visible()
    expect(page.get_by_role("button", name="Dismiss all 20 matching")).to_be_visible()
    # The held rows come before the first dismiss-only group.
    assert row.bounding_box()["y"] < groups.first.bounding_box()["y"]
    screenshot(page, "conflicts")
    keep("conflicts")

    row.get_by_label("Assign to").select_option(label="approver")
    row.get_by_role("button", name="Assign").click()
    expect(page.get_by_role("status")).to_have_text(f"Assigned {first.key} to approver.")
    expect(page.locator("#held tbody tr").filter(has_text=first.key)).to_contain_text("Assigned to approver.")
    assert Operation.objects.get(pk=first.pk).assigned_to == approver

    brief = page.get_by_role("form", name="Dismiss all 40 matching conflicts of prepare-brief")
    brief.get_by_label("Reason").fill("the brief generator's retries; the recorded briefs stand")
    brief.get_by_role("button", name="Dismiss all 40 matching").click()
    expect(page.get_by_role("status")).to_contain_text("Dismissed 40 conflicts of")
    notices = page.get_by_role("form", name="Dismiss all 20 matching conflicts of send-notice")
    notices.get_by_label("Reason").fill("notices already sent; the resends changed the wording only")
    notices.get_by_role("button", name="Dismiss all 20 matching").click()
    expect(page.get_by_role("status")).to_contain_text("Dismissed 20 conflicts of")
    expect(tabs.locator("[data-state='dismiss_only'] .tab-count")).to_have_text("0")
    expect(tabs.locator("[data-state='decided'] .tab-count")).to_have_text("60")
    assert AuditEvent.objects.filter(kind="conflict_dismissed", actor="operator").count() == 60

    # The second refund's amount the operator cannot read: they keep the recorded one.
    other = page.locator("#held tbody tr").filter(has_text=second.key)
    other.get_by_label("Reason").fill("a resend of the first request; the recorded refund stands")
    other.get_by_role("button", name="Dismiss and release").click()
    expect(page.get_by_role("status")).to_contain_text(f"Dismissed 1 conflict of {second.key}")
    page.get_by_role("button", name="Log out").click()

    log_in(page, "approver")
    page.goto("/console/conflicts/")
    row = page.locator("#held tbody tr")
    expect(row).to_have_count(1)
    expect(row.locator("td.differences")).to_have_text("Amount: 43.50 EUR → 43.51 EUR")
    expect(row).to_contain_text("Assigned to approver.")
    screenshot(page, "conflict-held")
    keep("conflict-held")
    row.get_by_label("Reason").fill("the customer agreed the corrected amount")
    row.get_by_role("button", name="Apply incoming and release").click()
    expect(page.get_by_role("status")).to_contain_text("Applied the incoming payload of conflict")
    first.refresh_from_db()
    assert (first.state, first.payload["amount_cents"]) == ("pending_approval", 4351)
    expect(page.locator(".state-tabs [data-state=''] .tab-count")).to_have_text("0")


def test_a_days_conflicts_on_a_phone(page, busy_day):
    first, _ = busy_day
    make_user("operator", OPERATOR)
    make_user("approver", APPROVER)
    page.set_viewport_size({"width": 390, "height": 844})

    log_in(page, "operator")
    page.goto("/console/conflicts/")

    row = page.locator("#held tbody tr").filter(has_text=first.key)
    differences = row.locator("td.differences")
    expect(differences).to_have_text("Amount: •••• → ••••")
    assert differences.bounding_box()["y"] < row.get_by_label("Reason").bounding_box()["y"]
    expect(row.get_by_role("button", name="Dismiss and release")).to_be_visible()
    # The bulk forms start folded on a phone, so the rows come first; a tap unfolds one.
    fold = page.locator("details.fold summary", has_text="Dismiss all 40 matching")
    expect(page.get_by_role("button", name="Dismiss all 40 matching")).to_be_hidden()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    screenshot(page, "narrow-conflicts")
    keep("narrow-conflicts")
    fold.click()
    expect(page.get_by_role("button", name="Dismiss all 40 matching")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


@pytest.mark.parametrize("role", [OPERATOR, APPROVER])
def test_held_conflicts_of_long_keys_fit_a_laptops_width(page, workspace, role):
    """Keys as long as a ledger of millions makes them: the held table stays within 1440 px."""
    held = [held_refund(workspace, f"R-{number}", 435000, 435100) for number in (4999998, 4999999)]
    make_user(role, role)
    page.set_viewport_size({"width": 1440, "height": 900})

    log_in(page, role)
    page.goto("/console/conflicts/")
    expect(page.locator("#held tbody tr")).to_have_count(2)
    screenshot(page, f"conflicts-held-long-keys-{role}")

    table = page.locator("#held table")
    scroll, client = table.evaluate("t => [t.scrollWidth, t.parentElement.clientWidth]")
    assert scroll <= client, (scroll, client, [op.key for op in held])
    assert page.evaluate("document.documentElement.scrollWidth") <= 1440
