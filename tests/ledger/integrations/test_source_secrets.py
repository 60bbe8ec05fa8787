"""Secrets a tenant can name are the tenant's: a source's variables carry its
workspace's prefix, ``OPSCONSOLE_SOURCE_<WORKSPACE>_``. A workspace admin (the admin) or an operator
(``integrations apply``) naming any other variable is refused with one message whether or not it is
set, and a source saved before the rule with another name is refused its deliveries, listed by
``manage.py check --database default``, never verified with a foreign secret."""

import html
import json
import logging
import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from ledger.models import AuditEvent, Delivery, Destination, Operation, Source, Workspace
from tests.ledger.integrations.test_sources import RULES, WHSEC, invoice_paid, post, standard_headers

OWN = "OPSCONSOLE_SOURCE_DEMO_BILLING"
# What a workspace admin of `demo` must not name: the web processes' own secrets, anything else in
# their environment, another workspace's variables, and one under a longer workspace's prefix
# (`demo-eu`'s variables start with OPSCONSOLE_SOURCE_DEMO_EU_, which starts with demo's prefix).
FOREIGN = [
    "SECRET_KEY",
    "OPSCONSOLE_AUDIT_KEY",
    "PATH",
    "OPSCONSOLE_SOURCE_OTHER_HOOK",
    "OPSCONSOLE_SOURCE_DEMO_EU_HOOK",
    "OPSCONSOLE_SOURCE_DEMO_",
]


@pytest.fixture
def workspaces(workspace):
    """demo (the workspace fixture) and two others whose prefixes a demo admin might reach for."""
    Workspace.objects.create(slug="other")
    Workspace.objects.create(slug="demo-eu")
    return workspace


@pytest.fixture
def boss(client, person, workspaces):
    """A client logged in as demo's workspace admin (staff, role admin; not a superuser)."""
    user = person("boss", "admin")
    user.is_staff = True
    user.save()
    client.force_login(user)
    return client


def apply_text(tmp_path, text: str) -> str:
    path = tmp_path / "integrations.yaml"
    path.write_text(text)
    out = StringIO()
    call_command("integrations", "apply", str(path), stdout=out)
    return out.getvalue()


def source_file(**fields) -> str:
    row = {"slug": "billing", "workspace": "demo", "scheme": "standard_webhooks", "secret_env": OWN} | fields
    return "sources:\n  - " + "\n    ".join(f"{name}: {value}" for name, value in row.items()) + "\n"


def refused_message(name: str, field: str = "secret_env") -> str:
    return (
        f"{field}: {name} is not workspace demo's to name: the variables its sources and subscriptions name "
        "start with OPSCONSOLE_SOURCE_DEMO_"
    )


def without_csrf(page: bytes) -> str:
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", page.decode())


# --- refused, and the same whether the variable is set or not --------------------------------------


@pytest.mark.parametrize("field", ["secret_env", "previous_secret_env"])
@pytest.mark.parametrize("name", FOREIGN)
def test_integrations_apply_refuses_a_variable_outside_the_workspaces_prefix(
    tmp_path, workspaces, monkeypatch, name, field
):
    text = source_file(**{field: name})
    answers = []
    for value in (WHSEC, None):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
        with pytest.raises(CommandError) as refused:
            apply_text(tmp_path, text)
        answers.append(str(refused.value))

    assert answers[0] == answers[1]
    assert f"sources[0].{refused_message(name, field)}" in answers[0]
    assert not Source.objects.exists()


@pytest.mark.parametrize("name", FOREIGN)
def test_the_admin_refuses_a_workspace_admin_a_foreign_variable_and_says_the_same_whether_it_is_set(
    boss, workspaces, monkeypatch, name
):
    form = {"workspace": workspaces.pk, "slug": "billing", "scheme": "standard_webhooks", "secret_env": name}
    form |= {"previous_secret_env": "", "tolerance_seconds": 300, "rules": "[]"}
    monkeypatch.setenv(name, WHSEC)
    when_set = boss.post("/admin/ledger/source/add/", form)
    monkeypatch.delenv(name)
    when_unset = boss.post("/admin/ledger/source/add/", form)

    assert when_set.status_code == when_unset.status_code == 200
    assert html.escape(refused_message(name)) in when_set.content.decode()
    assert without_csrf(when_set.content) == without_csrf(when_unset.content)
    assert not Source.objects.exists()


def test_workspaces_whose_slugs_share_a_prefix_may_name_none_of_its_variables(tmp_path, workspaces, monkeypatch):
    """`demo` and `Demo` (or `demo_eu` beside `demo-eu`) spell the same prefix: a variable under it
    could be either's, so it is neither's."""
    Workspace.objects.create(slug="Demo")

    with pytest.raises(CommandError, match=re.escape(refused_message(OWN))):
        apply_text(tmp_path, source_file())


# --- the workspace's own variables -------------------------------------------------------------------


def test_a_variable_under_the_workspaces_prefix_is_taken_and_its_deliveries_verified(
    client, tmp_path, workspaces, monkeypatch
):
    monkeypatch.setenv(OWN, WHSEC)
    assert apply_text(tmp_path, source_file(rules=json.dumps(RULES))).strip() == "changed: source billing: created"
    body = invoice_paid()

    response = post(client, Source.objects.get(), body, standard_headers(body))

    assert response.status_code == 201, response.json()
    assert Operation.objects.get().payload["request_id"] == "in_1"


def test_a_workspace_admin_adds_a_source_under_the_prefix_and_sees_whether_it_is_set(boss, workspaces, monkeypatch):
    monkeypatch.setenv(OWN, WHSEC)
    form = {"workspace": workspaces.pk, "slug": "billing", "scheme": "standard_webhooks", "secret_env": OWN}
    form |= {"previous_secret_env": "OPSCONSOLE_SOURCE_DEMO_BILLING_OLD", "tolerance_seconds": 300, "rules": "[]"}

    added = boss.post("/admin/ledger/source/add/", form)

    assert added.status_code == 302, added.content.decode()[:2000]
    page = boss.get(f"/admin/ledger/source/{Source.objects.get().pk}/change/").content.decode()
    assert f"{OWN}: set, OPSCONSOLE_SOURCE_DEMO_BILLING_OLD: missing" in page
    assert WHSEC not in page


# --- a source saved before the rule ------------------------------------------------------------------


@pytest.fixture
def old_source(workspaces, monkeypatch):
    """A source saved before the rule, bound to a variable its workspace admin knows the value of."""
    monkeypatch.setenv("SECRET_KEY", WHSEC)
    return Source.objects.create(
        workspace=workspaces, slug="billing", scheme="standard_webhooks", secret_env="SECRET_KEY", rules=RULES
    )


def test_a_delivery_to_a_source_with_a_foreign_variable_is_refused_with_the_reason(client, old_source, caplog):
    body = invoice_paid()

    with caplog.at_level(logging.ERROR):
        response = post(client, old_source, body, standard_headers(body, secret=WHSEC))

    assert response.status_code == 503
    assert not Operation.objects.exists()
    assert not Delivery.objects.exists()
    assert (
        "source billing: SECRET_KEY is not workspace demo's to name: the variables its sources and subscriptions "
        "name start with OPSCONSOLE_SOURCE_DEMO_ (rename it: docs/operations.md)" in caplog.text
    )


def test_a_source_whose_previous_variable_is_foreign_is_refused_too(client, old_source, caplog, monkeypatch):
    monkeypatch.setenv(OWN, "whsec_" + "b3duIHNlY3JldCBvZiB0aGlydHktdHdvIGJ5dGVzISE=")
    Source.objects.filter(pk=old_source.pk).update(secret_env=OWN, previous_secret_env="SECRET_KEY")
    body = invoice_paid()

    response = post(client, Source.objects.get(), body, standard_headers(body, secret=WHSEC))

    assert response.status_code == 503
    assert not Operation.objects.exists()


def test_the_admin_shows_an_old_sources_foreign_variable_as_to_rename_never_as_set(boss, old_source, monkeypatch):
    url = f"/admin/ledger/source/{old_source.pk}/change/"
    when_set = boss.get(url)
    monkeypatch.delenv("SECRET_KEY")
    when_unset = boss.get(url)

    assert "SECRET_KEY: not this workspace&#x27;s variable, rename it" in when_set.content.decode()
    assert without_csrf(when_set.content) == without_csrf(when_unset.content)
    assert "SECRET_KEY: not this workspace" in boss.get("/admin/ledger/source/").content.decode()


def test_manage_py_check_lists_the_sources_whose_variables_lack_their_prefix(old_source, workspaces):
    Source.objects.create(workspace=workspaces, slug="fine", scheme="github", secret_env="OPSCONSOLE_SOURCE_DEMO_GH")
    errors = StringIO()

    call_command("check", "--database", "default", stderr=errors, stdout=StringIO())

    assert "ledger.W001" in errors.getvalue()
    assert "billing (workspace demo): SECRET_KEY" in errors.getvalue()
    assert "fine" not in errors.getvalue()


# --- destinations: a superuser's, outside the sources' names ----------------------------------------


def test_a_workspace_admin_cannot_configure_a_destination(boss):
    form = {"slug": "crm", "base_url": "https://crm.example.com", "auth": "bearer", "secret_env": "SECRET_KEY"}

    assert boss.post("/admin/ledger/destination/add/", form).status_code == 403
    assert not Destination.objects.exists()


def test_a_destinations_credential_is_never_a_variable_a_workspace_may_name(tmp_path, workspaces):
    text = "destinations:\n  - slug: crm\n    base_url: https://crm.example.com\n    auth: bearer\n"
    text += "    secret_env: OPSCONSOLE_SOURCE_DEMO_CRM\n"

    with pytest.raises(CommandError, match="destinations\\[0\\].secret_env: OPSCONSOLE_SOURCE_ names are sources'"):
        apply_text(tmp_path, text)
    assert not Destination.objects.exists()
    assert not AuditEvent.objects.filter(kind="destination_created").exists()


def test_the_check_reads_only_the_columns_it_needs_so_migrate_can_run_behind_the_models(old_source):
    """`manage.py migrate` runs the checks first, against the tables the release before left: a
    column the models have gained since (here: one the workspace's table lacks) must not stop it."""
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE ledger_workspace RENAME COLUMN audit_lanes TO audit_lanes_not_yet")
    errors = StringIO()

    call_command("check", "--database", "default", stderr=errors, stdout=StringIO())

    assert "billing (workspace demo): SECRET_KEY" in errors.getvalue()
