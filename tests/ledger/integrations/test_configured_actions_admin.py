"""Destinations and HTTP actions in the admin: the same checks as the integrations file, refused on
save saying where; credentials shown only as set or missing; the retry schedule a policy gives."""

import json

import pytest

from ledger.actions import get_action
from ledger.models import AuditEvent, Destination, HttpAction

DESTINATION_FORM = {
    "slug": "crm",
    "base_url": "https://crm.example.com/api",
    "auth": "bearer",
    "auth_header": "",
    "secret_env": "CRM_TOKEN",
    "connect_timeout_seconds": "3",
    "timeout_seconds": "10",
    "idempotency_header": "",
    "idempotency_key_retention_seconds": "",
    "rate_limit_per_second": "",
    "max_concurrency": "4",
    "breaker_threshold": "",
    "breaker_cooldown_seconds": "30",
}


def action_form(destination: Destination, **changes) -> dict:
    form = {
        "name": "notify-crm",
        "destination": destination.pk,
        "schema": json.dumps({"type": "object", "properties": {"request_id": {"type": "string"}}}),
        "identity_fields": '["request_id"]',
        "normalisers": '{"request_id": "identifier"}',
        "fingerprint_fields": '["request_id"]',
        "sensitive_fields": "[]",
        "money_fields": "{}",
        "max_attempts": "4",
        "backoff_base_seconds": "2",
        "backoff_cap_seconds": "10",
        "deadline_seconds": "86400",
        "settle_after_seconds": "30",
        "ordering": "independent",
        "on_conflict": "first_wins",
        "payload_retention_days": "30",
        "key_retention_days": "90",
        "performed_by": "opsconsole",
        "claim_lease_seconds": "60",
        "service_level_seconds": "",
        "request": json.dumps({"method": "POST", "path": "/notes", "body": {"ref": "{{ key }}"}}),
        "response": "{}",
        "lookup": "{}",
        "listing": "{}",
    }
    return form | changes


@pytest.fixture
def superuser_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", email=None, password=None))
    return client


def test_a_superuser_adds_a_destination_and_sees_only_whether_its_credential_is_set(superuser_client, monkeypatch):
    added = superuser_client.post("/admin/ledger/destination/add/", DESTINATION_FORM)
    assert added.status_code == 302
    destination = Destination.objects.get()
    assert AuditEvent.objects.filter(kind="destination_created", actor="root").exists()

    page = superuser_client.get(f"/admin/ledger/destination/{destination.pk}/change/").content.decode()
    assert "CRM_TOKEN: missing" in page
    monkeypatch.setenv("CRM_TOKEN", "sk_live_do_not_show")
    page = superuser_client.get("/admin/ledger/destination/").content.decode()
    assert "CRM_TOKEN: set" in page
    assert "sk_live_do_not_show" not in page


def test_a_destination_given_its_secret_instead_of_a_variable_is_refused(superuser_client):
    refused = superuser_client.post("/admin/ledger/destination/add/", DESTINATION_FORM | {"secret_env": "sk_live_1"})
    assert refused.status_code == 200
    assert "secret_env: the name of an environment variable" in refused.content.decode()
    assert not Destination.objects.exists()


def test_an_http_action_whose_template_does_not_compile_is_refused_saying_where(superuser_client):
    destination = Destination.objects.create(slug="crm", base_url="https://crm.example.com")
    broken = json.dumps({"method": "POST", "path": "/notes", "body": {"ref": "{{ key.[ }}"}})

    refused = superuser_client.post("/admin/ledger/httpaction/add/", action_form(destination, request=broken))

    assert refused.status_code == 200
    assert "request.body.ref: `key.[` does not compile" in refused.content.decode()
    assert not HttpAction.objects.exists()


def test_a_saved_http_action_is_an_action_at_once_and_shows_its_retry_schedule(superuser_client):
    destination = Destination.objects.create(slug="crm", base_url="https://crm.example.com")

    added = superuser_client.post("/admin/ledger/httpaction/add/", action_form(destination))

    assert added.status_code == 302
    assert get_action("notify-crm").max_attempts == 4
    action = HttpAction.objects.get()
    page = superuser_client.get(f"/admin/ledger/httpaction/{action.pk}/change/").content.decode()
    assert "up to 4 s, 8 s, 10 s (4 tries)" in page
    assert AuditEvent.objects.filter(kind="http_action_created", actor="root").exists()


CALLER_FORM = {
    "performed_by": "caller",
    "claim_lease_seconds": "120",
    "service_level_seconds": "600",
    "request": "{}",
    "lookup": json.dumps({"path": "/notes?ref={{ key }}"}),
}


def test_a_caller_action_is_saved_in_the_admin_without_a_request_and_claims_take_its_lease(superuser_client):
    destination = Destination.objects.create(slug="crm", base_url="https://crm.example.com")

    added = superuser_client.post("/admin/ledger/httpaction/add/", action_form(destination, **CALLER_FORM))

    assert added.status_code == 302, added.content.decode()[-2000:]
    action = get_action("notify-crm")
    assert (action.performed_by_caller, action.claim_lease.total_seconds(), action.service_level.total_seconds()) == (
        True,
        120,
        600,
    )
    listed = superuser_client.get("/admin/ledger/httpaction/").content.decode()
    assert "performed by the caller (claims)" in listed
    assert AuditEvent.objects.get(kind="http_action_created").message == (
        "HTTP action notify-crm: performed by the caller, looked up at crm/notes?ref={{ key }}"
    )


def test_a_caller_action_with_a_request_is_refused_in_the_admin_saying_why(superuser_client):
    destination = Destination.objects.create(slug="crm", base_url="https://crm.example.com")
    with_request = CALLER_FORM | {"request": json.dumps({"method": "POST", "path": "/notes"})}

    refused = superuser_client.post("/admin/ledger/httpaction/add/", action_form(destination, **with_request))

    assert refused.status_code == 200
    assert "request: a caller action declares no request" in refused.content.decode()
    assert not HttpAction.objects.exists()


def test_a_workspace_admin_sees_destinations_and_actions_but_only_a_superuser_edits_them(client, person):
    destination = Destination.objects.create(slug="crm", base_url="https://crm.example.com")
    boss = person("boss", "admin")
    boss.is_staff = True
    boss.save()
    client.force_login(boss)

    assert "crm" in client.get("/admin/ledger/destination/").content.decode()
    assert client.post("/admin/ledger/destination/add/", DESTINATION_FORM | {"slug": "x"}).status_code == 403
    assert client.post("/admin/ledger/httpaction/add/", action_form(destination)).status_code == 403
    assert not HttpAction.objects.exists()


def test_an_http_actions_json_is_shown_indented_and_saved_back_unchanged(superuser_client):
    """A schema or a request is read one key a line; saving the page as shown changes nothing."""
    destination = Destination.objects.create(slug="crm", base_url="https://crm.example.com")
    superuser_client.post("/admin/ledger/httpaction/add/", action_form(destination))
    action = HttpAction.objects.get()

    page = superuser_client.get(f"/admin/ledger/httpaction/{action.pk}/change/")

    form = page.context["adminform"].form
    shown = {name: form[name].value() for name in ("schema", "request", "identity_fields")}
    assert shown["request"] == json.dumps(action.request, indent=2, ensure_ascii=False)
    resaved = superuser_client.post(
        f"/admin/ledger/httpaction/{action.pk}/change/",
        action_form(destination) | {name: form[name].field.prepare_value(form.initial[name]) for name in shown},
    )
    assert resaved.status_code == 302
    action.refresh_from_db()
    assert (action.schema, action.request, action.identity_fields) == tuple(
        json.loads(form[name].field.prepare_value(form.initial[name])) for name in shown
    )
