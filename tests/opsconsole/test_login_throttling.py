"""Login throttling (django-axes): wrong passwords lock one username at one address out for a while."""

from datetime import timedelta

import pytest
import time_machine
from django.core.management import call_command
from django.test import RequestFactory
from django.urls import reverse
from django.utils import timezone

from opsconsole.proxy import client_ip

PASSWORD = "the-right-password"


@pytest.fixture(autouse=True)
def fast_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def operator(django_user_model):
    return django_user_model.objects.create_user("operator", password=PASSWORD)


def log_in(client, password, *, username="operator", address="198.51.100.7"):
    return client.post(reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=address)


def logged_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_it_locks_out_after_the_failure_limit_even_with_the_right_password(client, operator, settings):
    """50 wrong passwords, then the right one: not logged in; the lockout page says why."""
    for _ in range(50):
        log_in(client, "guess")

    response = log_in(client, PASSWORD)

    assert response.status_code == 429
    assert not logged_in(client)
    page = response.content.decode()
    assert "Too many failed logins" in page
    assert f"After {settings.AXES_FAILURE_LIMIT} wrong passwords for <strong>operator</strong>" in page
    assert "paused for\n    15 minutes after the last attempt" in page
    assert 'class="brand"' in page  # the console's own layout


def test_it_answers_the_login_form_until_the_limit_then_the_lockout_page(client, operator, settings):
    statuses = [log_in(client, "guess").status_code for _ in range(settings.AXES_FAILURE_LIMIT)]

    assert statuses == [200] * (settings.AXES_FAILURE_LIMIT - 1) + [429]


def test_it_lets_the_person_in_once_the_cool_off_has_passed(client, operator, settings):
    for _ in range(50):
        log_in(client, "guess")
    last_failure = timezone.now()

    with time_machine.travel(last_failure + settings.AXES_COOLOFF_TIME + timedelta(seconds=1), tick=False):
        response = log_in(client, PASSWORD)

    assert response.status_code == 302
    assert response.url == reverse("console:queue")
    assert logged_in(client)


def test_trying_while_locked_out_starts_the_wait_again(client, operator, settings):
    for _ in range(50):
        log_in(client, "guess")
    last_failure = timezone.now()

    with time_machine.travel(last_failure + settings.AXES_COOLOFF_TIME - timedelta(seconds=5), tick=False):
        assert log_in(client, PASSWORD).status_code == 429
    with time_machine.travel(last_failure + settings.AXES_COOLOFF_TIME + timedelta(seconds=1), tick=False):
        assert log_in(client, PASSWORD).status_code == 429

    assert not logged_in(client)


def test_it_locks_only_that_username_at_that_address(client, operator, django_user_model):
    django_user_model.objects.create_user("approver", password=PASSWORD)
    for _ in range(10):
        log_in(client, "guess", address="198.51.100.7")

    assert log_in(client, PASSWORD, username="approver", address="198.51.100.7").status_code == 302
    client.logout()
    assert log_in(client, PASSWORD, username="operator", address="203.0.113.9").status_code == 302


def test_it_forgets_failures_after_a_successful_login(client, operator, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        log_in(client, "guess")
    assert log_in(client, PASSWORD).status_code == 302
    client.logout()

    statuses = [log_in(client, "guess").status_code for _ in range(settings.AXES_FAILURE_LIMIT - 1)]

    assert statuses == [200] * (settings.AXES_FAILURE_LIMIT - 1)


def test_it_throttles_the_admin_login_too(client, django_user_model, settings):
    django_user_model.objects.create_superuser("admin", password=PASSWORD)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        client.post(reverse("admin:login"), {"username": "admin", "password": "guess"})

    response = client.post(reverse("admin:login"), {"username": "admin", "password": PASSWORD})

    assert response.status_code == 429
    assert not logged_in(client)


def test_an_administrator_unlocks_a_person_with_the_axes_command(client, operator):
    """The runbook's unlock: `manage.py axes_reset_username NAME`."""
    for _ in range(10):
        log_in(client, "guess")

    call_command("axes_reset_username", "operator", verbosity=0)

    assert log_in(client, PASSWORD).status_code == 302


# --- which address a login comes from ------------------------------------------------------------


def request_from(remote_addr, forwarded_for=None):
    extra = {"HTTP_X_FORWARDED_FOR": forwarded_for} if forwarded_for is not None else {}
    return RequestFactory().get("/", REMOTE_ADDR=remote_addr, **extra)


def test_a_direct_client_is_its_remote_address_whatever_it_claims():
    assert client_ip(request_from("198.51.100.7")) == "198.51.100.7"
    assert client_ip(request_from("198.51.100.7", "203.0.113.1")) == "198.51.100.7"


def test_behind_our_proxy_the_client_is_the_address_the_proxy_appended(settings):
    """A client that writes its own X-Forwarded-For cannot pick its address: only the proxy's entry,
    the right-most, is believed."""
    settings.OPSCONSOLE_TRUSTED_PROXIES = ["127.0.0.1"]
    assert client_ip(request_from("127.0.0.1", "198.51.100.7")) == "198.51.100.7"
    assert client_ip(request_from("127.0.0.1", "203.0.113.1, 10.9.9.9, 198.51.100.7")) == "198.51.100.7"


def test_a_chain_of_trusted_proxies_is_walked_from_the_right(settings):
    settings.OPSCONSOLE_TRUSTED_PROXIES = ["127.0.0.1", "10.0.0.2"]

    assert client_ip(request_from("127.0.0.1", "203.0.113.1, 198.51.100.7, 10.0.0.2")) == "198.51.100.7"
    assert client_ip(request_from("127.0.0.1", "")) == "127.0.0.1"


def test_no_proxy_is_trusted_unless_one_is_named():
    """By default X-Forwarded-For is believed from nobody, the local host included: any process on
    the machine can connect from 127.0.0.1 and write the header."""
    assert client_ip(request_from("127.0.0.1", "198.51.100.7")) == "127.0.0.1"
    assert client_ip(request_from("::1", "198.51.100.7")) == "::1"


def test_a_local_process_cannot_guess_without_limit_by_rotating_x_forwarded_for(client, operator, settings):
    """With the default settings, wrong passwords sent from 127.0.0.1, each claiming another
    address, are one address's failures: locked out at the limit, the right password too."""
    statuses = [
        client.post(
            reverse("login"),
            {"username": "operator", "password": f"guess-{n}"},
            REMOTE_ADDR="127.0.0.1",
            HTTP_X_FORWARDED_FOR=f"198.51.100.{n}",
        ).status_code
        for n in range(settings.AXES_FAILURE_LIMIT + 3)
    ]
    right = client.post(
        reverse("login"),
        {"username": "operator", "password": PASSWORD},
        REMOTE_ADDR="127.0.0.1",
        HTTP_X_FORWARDED_FOR="203.0.113.250",
    )

    assert statuses == [200] * (settings.AXES_FAILURE_LIMIT - 1) + [429] * 4
    assert right.status_code == 429
    assert not logged_in(client)
