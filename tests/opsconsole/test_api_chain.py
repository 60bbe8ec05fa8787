"""The API runs through its own short middleware chain (``API_MIDDLEWARE``); the console through the
whole of ``MIDDLEWARE``. Django's test client builds its chains from the same settings as gunicorn's
worker (``opsconsole.wsgi``), so these requests take the path the server's take."""

from contextlib import ExitStack, contextmanager
from unittest import mock

import pytest
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.csrf import CsrfViewMiddleware

from opsconsole.api_handler import ApiPathMiddleware
from opsconsole.middleware import TimeZoneMiddleware

pytestmark = pytest.mark.django_db

CONSOLE_ONLY = (
    (SessionMiddleware, "process_request"),
    (CsrfViewMiddleware, "process_view"),
    (AuthenticationMiddleware, "process_request"),
    (XFrameOptionsMiddleware, "process_response"),
    (TimeZoneMiddleware, "__call__"),
)


@contextmanager
def console_middleware_watched():
    """Which of the console-only middleware ran, each still doing its work."""
    ran = []
    with ExitStack() as stack:
        for cls, hook in CONSOLE_ONLY:
            original = getattr(cls, hook)

            def spy(self, *args, _cls=cls, _original=original, **kwargs):
                ran.append(_cls.__name__)
                return _original(self, *args, **kwargs)

            stack.enter_context(mock.patch.object(cls, hook, spy))
        yield ran


def test_it_answers_the_api_without_the_consoles_middleware(client, token):
    with console_middleware_watched() as ran:
        response = client.get("/api/v1/operations", HTTP_AUTHORIZATION=f"Bearer {token}")

    assert response.status_code == 200
    assert ran == []
    # Its own: the request id, the security headers, the length.
    assert response["X-Request-ID"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Length"] == str(len(response.content))
    # None of the console's: no frame or content policy, no cookie, no Vary on Cookie.
    assert "X-Frame-Options" not in response
    assert "Content-Security-Policy" not in response
    assert not response.cookies
    assert "Cookie" not in response.get("Vary", "")


def test_the_console_still_runs_through_every_middleware(client, reviewer):
    client.force_login(reviewer)
    with console_middleware_watched() as ran:
        response = client.get("/console/")

    assert response.status_code == 200
    assert sorted(set(ran)) == sorted(cls.__name__ for cls, _ in CONSOLE_ONLY)
    assert response["X-Request-ID"]
    assert response["X-Frame-Options"] == "DENY"
    assert "Content-Security-Policy" in response


def test_the_api_docs_page_is_a_page_for_people(client):
    """Swagger UI is HTML under /api/: it takes the console's chain, its policies with it."""
    response = client.get("/api/v1/docs")

    assert response.status_code == 200
    assert (response["X-Frame-Options"], "Content-Security-Policy" in response) == ("DENY", True)


def test_the_api_still_refuses_a_host_not_allowed(client, token, settings):
    settings.ALLOWED_HOSTS = ["console.example.com"]

    refused = client.get("/api/v1/operations", HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_HOST="evil.example")
    allowed = client.get("/api/v1/operations", HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_HOST="console.example.com")

    assert (refused.status_code, allowed.status_code) == (400, 200)


def test_the_apis_chain_is_the_api_middleware_setting(settings):
    """The chain is built once, from the setting, with each hook Django's own handler would take
    (the database-unavailable 503 is an exception hook)."""
    chain = ApiPathMiddleware(lambda request: None)
    names = []
    handler = chain.api_chain
    while hasattr(handler, "__wrapped__"):
        handler = handler.__wrapped__
        if hasattr(handler, "get_response"):
            names.append(f"{type(handler).__module__}.{type(handler).__name__}")
            handler = handler.get_response
    assert names == settings.API_MIDDLEWARE
    assert settings.MIDDLEWARE[:2] == ["opsconsole.health.ProbeMiddleware", "opsconsole.api_handler.ApiPathMiddleware"]
