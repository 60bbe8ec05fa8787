"""An operator finds the work a pause holds: from the queue's health line to the held list, the
operation's banner, and the switch's count on Controls; then resumes it, and nothing is held."""

from datetime import datetime, timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, Control, Operation
from ledger.people import pause
from tests.conftest import R42
from tests.e2e.conftest import OPERATOR, log_in, make_user, screenshot

pytestmark = pytest.mark.e2e


def test_held_work_is_in_plain_sight_and_resumed(page, workspace):
    make_user("operator", OPERATOR)
    held = submit_event(workspace=workspace, source="api", raw={"action": "prepare-brief", "data": R42}).operation
    # It arrived three hours ago, and the pause was pulled two hours ago: its resume gives it those two.
    now = timezone.now()
    Operation.objects.filter(pk=held.pk).update(created_at=now - timedelta(hours=3), deadline=now + timedelta(hours=21))
    pause.set_paused(paused=True, reason="vendor outage", workspace=workspace, actor="alice")
    Control.objects.filter(workspace=workspace).update(paused_since=now - timedelta(hours=2))

    log_in(page, "operator")
    page.get_by_role("link", name="Held by a pause").click()
    expect(page.get_by_role("row").filter(has_text=held.key)).to_contain_text("workspace demo: vendor outage")
    screenshot(page, "queue-held")

    page.get_by_role("link", name=held.key).click()
    expect(page.get_by_role("status").filter(has_text="Held: the pause switch of workspace demo")).to_be_visible()

    page.get_by_role("link", name="Controls").first.click()
    expect(page.get_by_role("row").filter(has_text="vendor outage")).to_contain_text("1 operation")
    screenshot(page, "controls-holds")

    page.get_by_role("row").filter(has_text="vendor outage").get_by_role("button", name="Resume").click()
    expect(page.get_by_role("status").filter(has_text="Resumed workspace demo")).to_be_visible()
    resumed = AuditEvent.objects.get(kind="resumed")
    assert resumed.message.startswith("workspace demo, held 2 h 0 min")
    expect(page.get_by_role("row").filter(has_text="vendor outage")).to_have_count(0)

    page.goto("/console/?state=held")
    expect(page.get_by_text("No pause holds any work.")).to_be_visible()
    expect(page.get_by_role("link", name="Held by a pause")).to_have_count(0)
    page.goto(f"/console/operations/{held.pk}/")
    expect(page.get_by_text("Held: the pause switch")).to_have_count(0)
    # The deadline its next claim will write: the two held hours given (none written at the resume).
    # The page counts the held time up to when it is made, seconds after ``now`` (once across a
    # minute's boundary on a loaded CI run): within the test's own run time of ``now``'s.
    given = now + timedelta(hours=23)
    deadline = page.locator("dt:text-is('Deadline') + dd time")
    shown = datetime.fromisoformat(deadline.get_attribute("datetime"))
    assert given - timedelta(seconds=1) <= shown <= timezone.now() + timedelta(hours=23), (shown, given)
    held.refresh_from_db()
    assert held.state == "pending"  # due again, for the next worker's claim
    assert held.deadline == now + timedelta(hours=21)
    screenshot(page, "held-resumed")
