"""Every page carries a Content Security Policy that allows only our own scripts and styles, and the
pages need nothing else: no inline script, no CDN (browser checks: tests/e2e/test_csp.py)."""

import re
from pathlib import Path

import pytest
from django.urls import reverse

ROOT = Path(__file__).resolve().parents[2]


def directives(response) -> dict[str, list[str]]:
    policy = response["Content-Security-Policy"]
    return {name: values for name, *values in (part.split() for part in policy.split(";"))}


@pytest.fixture
def staff(client, django_user_model):
    user = django_user_model.objects.create_superuser("admin", password="pw")
    client.force_login(user)
    return user


@pytest.mark.parametrize(
    "page", ["console:queue", "console:controls", "console:audit", "admin:index", "admin:ledger_operation_changelist"]
)
def test_it_sends_the_policy_with_console_and_admin_pages(client, staff, page):
    response = client.get(reverse(page))

    assert response.status_code == 200
    policy = directives(response)
    assert policy["default-src"] == ["'self'"]
    assert policy["img-src"] == ["'self'", "data:"]
    assert policy["object-src"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["form-action"] == ["'self'"]


def test_it_sends_the_policy_with_the_login_page(client):
    response = client.get(reverse("login"))

    assert directives(response)["default-src"] == ["'self'"]


def test_the_api_docs_load_swagger_ui_from_our_static_files_without_inline_script(client):
    response = client.get("/api/v1/docs")

    assert response.status_code == 200
    page = response.content.decode()
    assert directives(response)["default-src"] == ["'self'"]
    assert '<script src="/static/ninja/swagger-ui-bundle.js">' in page
    assert '<script src="/static/ninja/swagger-ui-init.js">' in page
    assert "http" not in page  # nothing from another origin
    assert re.findall(r"<script(?![^>]*(?:\bsrc=|type=\"application/json\"))", page) == []


def test_our_templates_hold_no_inline_script_or_style():
    """What the policy forbids, our templates never write (a browser would refuse it)."""
    offenders = [
        f"{path.relative_to(ROOT)}: {match}"
        for path in (ROOT / "templates").rglob("*.html")
        for match in re.findall(r"<script(?![^>]*\bsrc=)[^>]*>|<style\b|\sstyle=|\son[a-z]+=", path.read_text())
    ]

    assert offenders == []
