"""The browser harness itself: Chromium reaches the live server and a person can log in."""

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import log_in, make_user

pytestmark = pytest.mark.e2e


def test_it_logs_a_staff_user_into_the_admin(page):
    """The admin's login form takes a staff user to the site administration."""
    make_user("admin", is_staff=True, is_superuser=True)

    log_in(page, "admin", path="/admin/login/")

    expect(page.get_by_role("heading", name="Site administration")).to_be_visible()


def test_it_refuses_a_wrong_password(page):
    """A wrong password keeps the person on the login form with an error."""
    make_user("admin", is_staff=True, is_superuser=True)

    page.goto("/admin/login/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("not-the-password")
    page.get_by_role("button", name="Log in").click()

    expect(page.get_by_text("Please enter the correct username and password")).to_be_visible()
