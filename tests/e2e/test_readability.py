"""The console read at a desk (1440 px) and on a phone (390 px) after a day of the demo's: the queue's
last error says status and the destination's code, badges stay in their cells, prose wraps between
words."""

import pytest
from playwright.sync_api import expect

from tests.day import a_full_day  # noqa: F401  the fixture
from tests.e2e.conftest import PASSWORD, screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("a_full_day")]

DESK = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}


def signed_in(browser, live_server, viewport, username="operator"):
    context = browser.new_context(base_url=live_server.url, viewport=viewport)
    context.set_default_timeout(10_000)
    page = context.new_page()
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    with page.expect_navigation():
        page.get_by_role("button", name="Log in").click()
    return page


def test_shots(browser, live_server, django_user_model):
    user = django_user_model.objects.get(username="operator")
    user.set_password(PASSWORD)
    user.save()
    for name, viewport in (("desk", DESK), ("phone", PHONE)):
        page = signed_in(browser, live_server, viewport)
        for path, shot in (("/console/?state=all", "queue"), ("/console/dashboard/", "dashboard"), ("/console/operations/", "operations")):
            page.goto(path)
            screenshot(page, f"{shot}-{name}")
        page.context.close()
