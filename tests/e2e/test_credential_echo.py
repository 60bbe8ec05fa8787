"""What a careless vendor said, as a viewer of another workspace that calls the same destination
reads it on the operation page: the refusal is there and reads sensibly, with
the destination's key masked in every form it was echoed in, and long opaque strings blanked."""

import pytest
from playwright.sync_api import expect

from ledger.core.privacy import MASK
from ledger.engine.processing import process_due_operations
from tests.e2e.conftest import log_in, make_user
from tests.echoing_vendor import filed, leaks

pytestmark = pytest.mark.e2e


def test_a_viewer_reads_the_vendors_refusal_with_the_key_masked(page, workspace, second_workspace, echoing_vendor):
    echoing_vendor.fail_next({"kind": "echo_credential", "status": 401}, {"kind": "echo_credential", "status": 401})
    filed(workspace, "R-1")
    theirs = filed(second_workspace, "R-1")
    process_due_operations(worker="w1")
    make_user("vic", "viewer", workspace="other")

    log_in(page, "vic")
    page.goto(f"/console/operations/{theirs.pk}/")
    answer = page.locator("details.answer")
    answer.locator("summary").click()

    expect(answer.locator("summary")).to_have_text("What the destination said: HTTP 401 invalid_api_key")
    expect(answer.locator("pre.answer-body")).to_contain_text(f'"bearer": "Bearer {MASK}"')
    expect(answer.locator("pre.answer-body")).to_contain_text(f'"detail": "Invalid API key provided: {MASK};')
    expect(answer.locator("dl.answer-headers")).to_contain_text(f"req_{MASK}")
    expect(answer.locator("pre.answer-body")).to_contain_text(f'"reversed_base64": "{MASK}"')  # no masking knows it
    expect(answer.locator("p.hint")).to_contain_text("Long opaque strings (tokens, ids, encoded values) are blanked")
    shown = page.locator("main").inner_text()
    assert leaks(shown) == [], shown
    assert "includer" not in shown
    assert "{#" not in shown  # no developer note printed
    page.screenshot(path="/tmp/mask2-operation.png", full_page=True)
