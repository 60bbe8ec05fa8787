"""A 404 a person meets is the console's own page, with DEBUG on too (as `make demo` runs): never
Django's debug page, which lists the project's URL patterns; the API keeps its JSON answer."""

import pytest
from django.contrib.auth.models import User

pytestmark = pytest.mark.django_db

DEBUG_PAGE = "You’re seeing this error because you have"


@pytest.fixture(params=[True, False], ids=["debug", "production"])
def debug(request, settings):
    settings.DEBUG = request.param
    return request.param


@pytest.fixture
def staff(client):
    user = User.objects.create_superuser("someone", password="x")
    client.force_login(user)
    return user


@pytest.mark.parametrize(
    "path",
    [
        "/console/nowhere/",  # no pattern matches
        "/console/operations/999999/",  # the view's Http404
        "/nowhere",  # not even a prefix of ours
        "/admin/ledger/nowhere/",  # the admin's own catch-all
    ],
)
def test_a_person_gets_the_consoles_not_found_page(client, staff, debug, path):
    page = client.get(path)

    assert page.status_code == 404
    text = page.content.decode()
    assert "<h1>Not found</h1>" in text
    assert DEBUG_PAGE not in text
    assert "urlpatterns" not in text.lower()


def test_the_api_answers_its_own_json(client, debug):
    answer = client.get("/api/v1/nowhere")

    assert answer.status_code == 404
    assert answer["Content-Type"].startswith("application/")


def test_a_missing_slash_still_redirects(client, staff, debug):
    assert client.get("/console/failures").status_code == 301
