"""Every console page needs a login, and then the permission to view operations."""

import pytest
from django.urls import reverse

PAGES = ["/console/", "/console/controls/", "/console/audit/"]
ACTIONS = ["replay", "cancel", "approve", "reject"]


@pytest.fixture
def pages(make_operation):
    return PAGES + [f"/console/operations/{make_operation().pk}/"]


def test_it_sends_an_anonymous_visitor_to_the_login_page_and_back(client, pages):
    for page in pages:
        response = client.get(page)
        assert response.status_code == 302, page
        assert response.url == f"/accounts/login/?next={page}"


def test_it_sends_anonymous_posts_to_the_login_page(client, make_operation):
    operation = make_operation("needs_review")
    urls = [reverse(f"console:{name}", args=[operation.pk]) for name in ACTIONS]
    urls += [reverse("console:pause"), reverse("console:resume")]
    for url in urls:
        response = client.post(url, {"reason": "x"})
        assert response.status_code == 302, url
        assert response.url.startswith("/accounts/login/?next="), url
    operation.refresh_from_db()
    assert operation.state == "needs_review"


def test_it_refuses_a_logged_in_user_without_the_view_permission(client, login, pages):
    login("nobody")
    for page in pages:
        assert client.get(page).status_code == 403, page


def test_it_shows_every_page_to_a_user_with_the_view_permission(client, login, pages):
    login("viewer")
    for page in pages:
        assert client.get(page).status_code == 200, page


def test_it_redirects_the_site_root_to_the_console(client):
    response = client.get("/")
    assert (response.status_code, response.url) == (302, "/console/")


def test_it_logs_in_with_the_login_form_and_lands_on_the_queue(client, django_user_model):
    django_user_model.objects.create_user(username="ann", password="a-long-password")
    page = client.get("/accounts/login/")
    assert page.status_code == 200
    assert b"<h1>Log in</h1>" in page.content

    response = client.post("/accounts/login/", {"username": "ann", "password": "a-long-password"})

    assert (response.status_code, response.url) == (302, "/console/")


def test_it_logs_out_with_a_post_only(client, login):
    login("viewer")
    page = client.get("/console/").content.decode()
    assert 'action="/accounts/logout/"' in page
    assert "Log out" in page

    assert client.get("/accounts/logout/").status_code == 405
    response = client.post("/accounts/logout/")

    assert (response.status_code, response.url) == (302, "/accounts/login/")
    assert client.get("/console/").status_code == 302


def test_it_shows_the_navigation_and_the_user_name(client, login):
    login("operator")
    page = client.get("/console/").content.decode()
    for text in ["Needs attention", "Controls", "Audit", "operator", "Log out"]:
        assert text in page
