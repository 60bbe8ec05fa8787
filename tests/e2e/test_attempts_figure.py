"""An operator reads an operation whose worker died holding it: the attempts figure counts the try
toward the action's limit, and says why the attempt list below has no row for it."""

from datetime import timedelta

import pytest
import time_machine
from django.conf import settings
from django.utils import timezone
from playwright.sync_api import expect

from ledger.engine.claiming import claim_due_operations
from ledger.intake.submit import submit_event
from ledger.sweep import sweep
from tests.conftest import R42
from tests.e2e.conftest import OPERATOR, log_in, make_user, screenshot

pytestmark = pytest.mark.e2e


def test_a_try_whose_worker_died_is_counted_and_explained(page, workspace):
    make_user("operator", OPERATOR)
    operation = submit_event(workspace=workspace, source="api", raw={"action": "prepare-brief", "data": R42}).operation
    claim_due_operations(limit=10, worker="dead")
    after_lease = timezone.now() + timedelta(seconds=settings.OPSCONSOLE_LEASE_SECONDS + 1)
    with time_machine.travel(after_lease, tick=False):
        assert sweep(now=after_lease).leases_expired == 1

    log_in(page, "operator")
    page.goto(f"/console/operations/{operation.pk}/")
    figure = page.locator("dt:text-is('Attempts') + dd")
    expect(figure).to_contain_text("1 of 5")
    expect(figure).to_contain_text("0 listed below")
    expect(figure).to_contain_text("a try whose worker stopped before recording anything leaves no row")
    expect(page.get_by_text("No attempts yet.")).to_be_visible()
    screenshot(page, "operation-attempts-figure")
