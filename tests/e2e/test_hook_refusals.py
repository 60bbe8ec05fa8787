"""A viewer opens the deliveries page after a sender forged 200 deliveries to a hook: one
line says how many were refused, from where and when, instead of 200 rows."""

import base64
from datetime import UTC, datetime

import httpx
import pytest
from playwright.sync_api import expect
from standardwebhooks.webhooks import Webhook

from ledger.models import Delivery, Source
from tests.e2e.conftest import log_in, make_user, screenshot

pytestmark = pytest.mark.e2e

FORGED = "whsec_" + base64.b64encode(b"x" * 32).decode()


def test_forged_deliveries_show_as_one_counted_line(page, live_server, workspace, monkeypatch):
    monkeypatch.setenv(
        "OPSCONSOLE_SOURCE_DEMO_HOOK", "whsec_" + base64.b64encode(b"a secret of thirty-two bytes!!!!").decode()
    )
    Source.objects.create(
        workspace=workspace, slug="billing", scheme="standard_webhooks", secret_env="OPSCONSOLE_SOURCE_DEMO_HOOK"
    )
    body = '{"type": "invoice.paid"}'
    with httpx.Client(base_url=live_server.url) as sender:
        for n in range(200):
            at = datetime.now(UTC)
            headers = {
                "content-type": "application/json",
                "webhook-id": f"msg_{n}",
                "webhook-timestamp": str(int(at.timestamp())),
                "webhook-signature": Webhook(FORGED).sign(f"msg_{n}", at, body),
            }
            assert sender.post("/api/v1/hooks/billing", content=body, headers=headers).status_code == 401
    assert not Delivery.objects.exists()
    make_user("viewer", "viewer")

    log_in(page, "viewer", "/accounts/login/?next=/console/deliveries/")

    counted = page.locator("table.hook-refusals tbody tr")
    expect(counted).to_have_count(1)
    expect(counted).to_contain_text("Refused 200 times from 127.0.0.1, last at")
    expect(counted).to_contain_text("bad_signature")
    expect(counted).to_contain_text("source:billing")
    screenshot(page, "refusals")
