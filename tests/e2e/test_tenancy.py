"""A person of one workspace, in the browser: the queue and the controls show their workspace only,
and another workspace's operation is not found."""

import re

import pytest
from playwright.sync_api import expect

from ledger.core import accounts
from ledger.models import Operation
from ledger.people import pause
from tests.e2e.conftest import OPERATOR, log_in, make_user, screenshot
from tests.e2e.test_console import submit

pytestmark = pytest.mark.e2e

BRIEF = {"version": 1, "title": "Quarterly review", "owner": "ops"}


def test_it_shows_an_operator_only_their_workspace(page, workspace):
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    ours = submit(workspace, "prepare-brief", BRIEF | {"request_id": "OURS-1"})
    theirs = submit(other, "prepare-brief", BRIEF | {"request_id": "THEIRS-1"})
    Operation.objects.filter(pk__in=[ours.pk, theirs.pk]).update(state="needs_review")
    pause.set_paused(paused=True, actor="b-admin", reason="their incident", workspace=other)
    make_user("operator", OPERATOR)
    log_in(page, "operator")

    expect(page.get_by_role("link", name=ours.key)).to_be_visible()
    expect(page.get_by_text("THEIRS-1")).to_have_count(0)

    page.get_by_role("link", name="Controls").click()
    expect(page.get_by_text("their incident")).to_have_count(0)
    workspace_choices = page.get_by_label("Workspace").locator("option")
    expect(workspace_choices).to_have_text(["demo"])
    screenshot(page, "tenancy-controls")

    response = page.goto(f"/console/operations/{theirs.pk}/")
    assert response.status == 404
    expect(page).to_have_url(re.compile(rf"/console/operations/{theirs.pk}/$"))
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    expect(page.get_by_text("THEIRS-1")).to_have_count(0)
    screenshot(page, "tenancy-not-found")
