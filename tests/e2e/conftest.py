"""Browser tests: Playwright (sync API) drives Debian's Chromium against pytest-django's live server."""

import os

import pytest
from django.contrib.auth.models import User
from django.db import connections

from ledger.models import Membership, Workspace
from tests.echoing_vendor import echoing_vendor, second_workspace  # noqa: F401  fixtures

CHROMIUM = "/usr/bin/chromium"
# We run as root (no sandbox), and the machine has no network: keep Chromium from calling home.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
PASSWORD = "e2e-password"
SHOTS = os.environ.get("E2E_SHOTS", "/tmp/e2e-shots")  # named at the end of the run (tests/conftest.py)


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"needs Chromium at {CHROMIUM} (apt-get install chromium; .ci/run installs it)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an asyncio event loop in the main thread, and Django's ORM
    # refuses to run where a loop is running (SynchronousOnlyOperation), although these tests only
    # call it synchronously, between browser steps. Allowed only while this module's browser lives.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    # While Playwright runs, asgiref sees an event loop in this thread and gives Django a separate
    # set of connections: close the ones opened before, or they stay open (idle) for the rest of
    # the session, and the fault tests' "no other session" wait on PostgreSQL never ends.
    connections.close_all()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        connections.close_all()
        if previous is None:
            del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser, live_server):
    """A fresh browser context per test (no cookies carried over), pointed at the live server."""
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    page = context.new_page()
    yield page
    context.close()


def make_user(username: str, role: str | None = None, *, workspace: str = "demo", **fields) -> User:
    """A user with a password and ``role`` in ``workspace`` (no role: a member of nothing)."""
    user = User.objects.create_user(username, password=PASSWORD, **fields)
    if role:
        Membership.objects.create(user=user, workspace=Workspace.objects.get(slug=workspace), role=role)
    return user


OPERATOR = "operator"
APPROVER = "approver"


def log_in(page, username: str, path: str = "/accounts/login/") -> None:
    """Fill in and submit the real login form, as a person would."""
    page.goto(path)
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    with page.expect_navigation():
        page.get_by_role("button", name="Log in").click()


def screenshot(page, name: str) -> None:
    """A full-page screenshot for people to look at (never asserted)."""
    os.makedirs(SHOTS, exist_ok=True)
    page.screenshot(path=os.path.join(SHOTS, f"{name}.png"), full_page=True)
