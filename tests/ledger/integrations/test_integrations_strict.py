"""The configuration is read strictly: a key written twice in an integrations
file, at any level, or a section written twice, is refused saying where (line, column, the key), and
nothing changes. The admin's JSON fields refuse a key twice in an object the same way."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ledger.models import AuditEvent, Destination, HttpAction, Source

DESTINATION = """\
destinations:
  - slug: crm
    base_url: http://127.0.0.1:9/api
    auth: none
"""


def apply(tmp_path, text: str, name: str = "integrations.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    out = StringIO()
    call_command("integrations", "apply", str(path), stdout=out)
    return out.getvalue()


def refusal(tmp_path, text: str, name: str = "integrations.yaml") -> str:
    with pytest.raises(CommandError) as refused:
        apply(tmp_path, text, name)
    assert str(refused.value).startswith("nothing changed:")
    assert not Destination.objects.exists()
    assert not Source.objects.exists()
    assert not HttpAction.objects.exists()
    assert not AuditEvent.objects.filter(kind__regex=r"^(destination|source|http_action)_").exists()
    return str(refused.value)


def test_a_key_written_twice_in_a_row_is_refused_naming_its_line_and_the_first_one(tmp_path, db):
    """Reviewed as the loopback address, applied as the metadata one: the last key used to win."""
    text = DESTINATION.replace("    auth: none\n", "    auth: none\n    base_url: http://169.254.169.254/\n")

    message = refusal(tmp_path, text)

    assert "line 5, column 5: base_url appears twice in this mapping (first at line 3, column 5)" in message


def test_a_section_written_twice_is_refused_and_its_first_rows_are_not_dropped(tmp_path, db):
    text = DESTINATION + "destinations:\n  - slug: other\n    base_url: http://127.0.0.1:9/\n    auth: none\n"

    message = refusal(tmp_path, text)

    assert "line 5, column 1: destinations appears twice in this mapping (first at line 1, column 1)" in message


def test_a_key_written_twice_deep_in_a_rule_is_refused(tmp_path, workspace):
    text = """\
sources:
  - slug: billing
    workspace: demo
    scheme: stripe
    secret_env: OPSCONSOLE_SOURCE_DEMO_BILLING
    rules:
      - event: invoice.paid
        action: prepare-brief
        data: {request_id: data.object.id, version: "`1`", title: data.object.id, request_id: data.id}
"""

    message = refusal(tmp_path, text)

    assert "line 9, column 83: request_id appears twice in this mapping (first at line 9, column 16)" in message


def test_a_json_file_with_a_key_twice_is_refused_naming_its_line(tmp_path, db):
    text = '{\n  "destinations": [\n    {"slug": "crm", "auth": "none",\n     "slug": "crm2"}\n  ]\n}\n'

    message = refusal(tmp_path, text, "integrations.json")

    assert "line 4, column 6: slug appears twice in this mapping (first at line 3, column 6)" in message


def test_every_duplicate_is_named_not_only_the_first(tmp_path, db):
    text = DESTINATION + "    auth: bearer\n" + "destinations: []\n"

    message = refusal(tmp_path, text)

    assert "line 5, column 5: auth appears twice" in message
    assert "line 6, column 1: destinations appears" in message


def test_keys_that_read_as_the_same_value_are_the_same_key(tmp_path, db):
    """YAML reads `"auth"` and `auth` as one string: written both ways, it is one key twice."""
    message = refusal(tmp_path, DESTINATION + '    "auth": bearer\n')

    assert "line 5, column 5: auth appears twice" in message


def test_a_merge_key_overridden_by_the_row_is_no_duplicate(tmp_path, db):
    """YAML's `<<` merge is how a file shares fields between rows; a row's own key overrides it."""
    text = """\
destinations:
  - <<: {auth: none, timeout_seconds: 5}
    slug: crm
    base_url: http://127.0.0.1:9/api
    timeout_seconds: 7
"""

    assert apply(tmp_path, text).strip() == "changed: destination crm: created"
    assert Destination.objects.get().timeout_seconds == 7


# --- the admin's JSON fields ----------------------------------------------------------------------


@pytest.fixture
def superuser_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", email=None, password=None))
    return client


def test_the_admin_refuses_a_sources_rules_with_a_key_twice_saying_where(superuser_client, workspace):
    rules = (
        '[{"event": "invoice.paid", "action": "prepare-brief", "data": {"request_id": "data.object.id", '
        '"version": "`1`", "title": "data.id", "owner": "\'ops\'", "request_id": "data.id"}}]'
    )
    form = {
        "workspace": workspace.pk,
        "slug": "billing",
        "scheme": "stripe",
        "secret_env": "OPSCONSOLE_SOURCE_DEMO_BILLING",
        "previous_secret_env": "",
        "tolerance_seconds": 300,
        "rules": rules,
    }

    response = superuser_client.post("/admin/ledger/source/add/", form)

    assert response.status_code == 200
    assert "[0].data.request_id: appears more than once in its object" in response.content.decode()
    assert not Source.objects.exists()


def test_the_admin_refuses_an_http_actions_request_with_a_key_twice(superuser_client):
    from tests.ledger.integrations.test_configured_actions_admin import action_form

    destination = Destination.objects.create(slug="crm", base_url="https://crm.example.com", auth="none")
    request = '{"method": "POST", "path": "/notes", "path": "/admin"}'

    response = superuser_client.post("/admin/ledger/httpaction/add/", action_form(destination, request=request))

    assert response.status_code == 200
    assert "path: appears more than once in its object" in response.content.decode()
    assert not HttpAction.objects.exists()


def test_json_without_duplicates_is_still_taken_from_a_file(tmp_path, db):
    text = json.dumps({"destinations": [{"slug": "crm", "base_url": "http://127.0.0.1:9/", "auth": "none"}]})

    assert apply(tmp_path, text, "integrations.json").strip() == "changed: destination crm: created"
