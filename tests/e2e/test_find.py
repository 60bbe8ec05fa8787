"""Finding anything, as an operator does: a destination's record id typed into the top bar's Find
box lands on the operation it belongs to; a sender's bad delivery shows on the Deliveries page
with what was wrong with it, never what was sent."""

import httpx
import pytest
from playwright.sync_api import expect

from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from tests.conftest import external_event
from tests.e2e.conftest import OPERATOR, log_in, make_user, screenshot

pytestmark = pytest.mark.e2e


@pytest.fixture
def ticket(workspace, standin):
    """A file-ticket that went through the real processing path to the stand-in destination, and
    a second one: the destination gave each its own record id."""
    first = submit_event(
        workspace=workspace, source="api", raw=external_event("file-ticket", request_id="R-1")
    ).operation
    submit_event(
        workspace=workspace, source="api", raw=external_event("file-ticket", delivery_id="d-2", request_id="R-2")
    )
    process_due_operations(worker="w1")
    first.refresh_from_db()
    assert first.state == "succeeded"
    assert first.external_id
    return first


def test_finding_an_operation_by_its_destination_record_id(page, ticket):
    make_user("operator", OPERATOR)
    log_in(page, "operator")

    page.goto("/console/audit/")
    box = page.get_by_role("banner").get_by_label("Find", exact=True)
    box.fill(ticket.external_id)
    box.press("Enter")

    expect(page).to_have_url(f"/console/operations/{ticket.pk}/")
    expect(page.get_by_role("heading", level=1)).to_contain_text(ticket.key)
    expect(page.get_by_role("status")).to_have_text(f"Found {ticket.key} by its destination record id.")
    expect(page.get_by_text(ticket.external_id).first).to_be_visible()
    screenshot(page, "find-by-record-id")

    # A record id the destination never gave: nothing found, and where it looked.
    box = page.get_by_label("Find", exact=True)
    box.fill(ticket.external_id + "-not-ours")
    box.press("Enter")
    expect(page.get_by_role("status").filter(has_text="Nothing found for")).to_contain_text(
        f"{ticket.external_id}-not-ours"
    )
    expect(page.get_by_role("listitem").filter(has_text="destination record id").first).to_be_visible()
    expect(page.get_by_label("Find", exact=True)).to_have_value(ticket.external_id + "-not-ours")
    screenshot(page, "find-nothing")

    # The start of a key both tickets share: both listed, with what matched.
    box = page.get_by_label("Find", exact=True)
    box.fill("demo:R-")
    box.press("Enter")
    expect(page.get_by_text("2 operations match")).to_be_visible()
    expect(page.get_by_role("row").filter(has_text=ticket.key)).to_contain_text("key (its start)")
    screenshot(page, "find-several")


def test_an_invalid_delivery_sent_to_the_api_shows_on_the_deliveries_page(page, live_server, token):
    """An automation sends a refund whose amount is not a number: the API refuses it (422); an
    operator sees the refusal and its reason, but neither the customer nor the amount sent."""
    answer = httpx.post(
        f"{live_server.url}/api/v1/events",
        headers={"Authorization": f"Bearer {token}"},
        json={
            "action": "issue-refund",
            "delivery_id": "hook-7731",
            "data": {
                "request_id": "R-88",
                "version": 1,
                "customer_id": "C-SECRET-4471",
                "amount_cents": "lots",
                "currency": "EUR",
            },
        },
    )
    assert answer.status_code == 422, answer.text
    make_user("operator", OPERATOR)
    log_in(page, "operator")

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Deliveries").click()

    expect(page.get_by_role("heading", name="Deliveries that did not become work")).to_be_visible()
    row = page.get_by_role("row").filter(has_text="hook-7731")
    expect(row).to_contain_text("invalid")
    expect(row).to_contain_text("data.amount_cents")
    expect(row).to_contain_text("Input should be a valid integer")
    expect(row).to_contain_text("issue-refund")
    expect(page.locator("main")).not_to_contain_text("C-SECRET-4471")
    expect(page.locator("main")).not_to_contain_text("lots")
    screenshot(page, "deliveries-invalid")

    page.get_by_label("Outcome").select_option("stale")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_text("No refused delivery matches.")).to_be_visible()

    # The sender's delivery id, typed into Find, names the refusal too.
    box = page.get_by_label("Find", exact=True)
    box.fill("hook-7731")
    box.press("Enter")
    expect(page.get_by_text("Nothing found for")).to_be_visible()
    expect(page.get_by_role("row").filter(has_text="hook-7731")).to_contain_text("data.amount_cents")
    screenshot(page, "find-refused-delivery")
