"""Configured destinations and HTTP actions without a server: templates, the checks that refuse a
configuration saying where, the integrations file's new sections, and the registry reading rows."""

import json
from io import StringIO

import httpx
import pytest
import yaml
from django.core.management import CommandError, call_command

from ledger.actions import UnknownAction, get_action, registry
from ledger.core import privacy
from ledger.integrations import saving, templates
from ledger.integrations.destination_config import CredentialMissing, DestinationConfig
from ledger.integrations.http_action import form_fields
from ledger.models import AuditEvent, Destination, HttpAction, Operation
from ledger.outcomes import OutcomeError

SCHEMA = {
    "type": "object",
    "required": ["request_id", "amount"],
    "properties": {"request_id": {"type": "string"}, "amount": {"type": "integer"}, "note": {"type": "string"}},
}
ACTION = {
    "name": "notify-crm",
    "destination": "crm",
    "schema": SCHEMA,
    "identity_fields": ["request_id"],
    "normalisers": {"request_id": "identifier"},
    "fingerprint_fields": ["request_id", "amount"],
    "request": {
        "method": "POST",
        "path": "/contacts/{{ data.request_id }}/notes",
        "body": {"amount": "{{ data.amount }}"},
    },
    "lookup": {"path": "/notes?ref={{ key }}"},
}
DESTINATION = {"slug": "crm", "base_url": "https://crm.example.com/api", "auth": "bearer", "secret_env": "CRM_TOKEN"}


def file_text(destination=None, action=None) -> str:
    return yaml.safe_dump(
        {"destinations": [destination or DESTINATION], "http_actions": [action or ACTION]}, sort_keys=False
    )


def apply(tmp_path, text: str, *args) -> str:
    path = tmp_path / "integrations.yaml"
    path.write_text(text)
    out = StringIO()
    call_command("integrations", "apply", str(path), *args, stdout=out)
    return out.getvalue()


# Templates.


def test_a_template_keeps_a_whole_expressions_type_and_fills_text_around_others():
    context = {"data": {"amount": 2500, "tags": ["a", "b"], "name": "Ann Lee"}, "key": "w:R-1:act"}
    rendered = templates.render(
        {
            "amount": "{{ data.amount }}",
            "tags": "{{ data.tags }}",
            "label": "{{ data.name }} ({{ data.amount }})",
            "n": 3,
        },
        context,
    )
    assert rendered == {"amount": 2500, "tags": ["a", "b"], "label": "Ann Lee (2500)", "n": 3}
    assert templates.render("{{ data.missing }}", context) is None
    assert (
        templates.render_path("/notes?ref={{ key }}&who={{ data.name }}", context)
        == "/notes?ref=w%3AR-1%3Aact&who=Ann%20Lee"
    )


def test_an_expression_that_does_not_compile_is_named_with_where_it_is():
    problems = templates.problems({"body": {"amount": "{{ data.[ }}", "ok": "{{ key }}", "open": "{{ key"}}, "request")
    assert len(problems) == 2
    assert problems[0].startswith("request.body.amount: `data.[` does not compile")
    assert problems[1] == "request.body.open: a {{ without its }}"


def test_a_form_body_nests_in_the_bracket_convention():
    assert form_fields({"amount": 2500, "metadata": {"ref": "k"}, "items": [{"price": "p1"}], "skip": None}) == [
        ("amount", "2500"),
        ("metadata[ref]", "k"),
        ("items[0][price]", "p1"),
    ]


# Credentials come from the environment, never the database.


@pytest.mark.parametrize(
    ("auth", "header", "expected"),
    [
        ("bearer", "", {"Authorization": "Bearer s3cret"}),
        ("basic", "", {"Authorization": "Basic dXNlcjpzM2NyZXQ="}),
        ("header", "X-Api-Key", {"X-Api-Key": "s3cret"}),
    ],
)
def test_a_destination_reads_its_credential_from_the_variable_it_names(monkeypatch, auth, header, expected):
    monkeypatch.setenv("CRM_TOKEN", "user:s3cret" if auth == "basic" else "s3cret")
    destination = DestinationConfig.of(Destination(**DESTINATION | {"auth": auth, "auth_header": header}))
    assert destination.auth_headers() == expected
    monkeypatch.delenv("CRM_TOKEN")
    with pytest.raises(CredentialMissing, match="set CRM_TOKEN"):
        destination.auth_headers()


def test_the_admin_shows_a_credential_only_as_set_or_missing(monkeypatch):
    destination = Destination(**DESTINATION)
    assert saving.secret_status(destination) == "CRM_TOKEN: missing"
    monkeypatch.setenv("CRM_TOKEN", "s3cret")
    assert saving.secret_status(destination) == "CRM_TOKEN: set"


@pytest.mark.parametrize(("auth", "secret"), [("bearer", "s3cret-token"), ("basic", "ann:pa55word")])
def test_a_credential_the_destination_echoes_is_never_stored(tmp_path, db, monkeypatch, auth, secret):
    """A vendor that quotes the request's credential back in its refusal: the answer, the words and
    the message keep none of it, in any form it travelled in."""
    monkeypatch.setenv("CRM_TOKEN", secret)
    apply(tmp_path, file_text(destination=DESTINATION | {"auth": auth}))
    action = get_action("notify-crm")
    sent = action.destination.auth_headers()["Authorization"]
    echoed = {"error": {"code": "bad_auth", "message": f"rejected {sent} (user {secret.split(':')[0]})"}}
    request = httpx.Request("POST", "https://crm.example.com/api/contacts/R-1/notes")
    with pytest.raises(OutcomeError) as refused:
        action.answered(httpx.Response(401, json=echoed, request=request))

    error = privacy.scrub_failure(refused.value, Operation(action="notify-crm", payload={"request_id": "R-1"}), action)

    stored = " ".join([error.message, error.answer.body, error.answer.said, *error.answer.headers.values()])
    for form in {secret, *secret.split(":"), sent.split(" ", 1)[1]}:
        assert form not in stored
    assert error.answer.code == "bad_auth"
    assert privacy.MASK in error.answer.said


# The integrations file: destinations and HTTP actions.


def test_applying_a_destination_and_an_action_registers_the_action_and_twice_changes_nothing(tmp_path, db):
    assert apply(tmp_path, file_text()).splitlines() == [
        "changed: destination crm: created",
        "changed: HTTP action notify-crm: created",
    ]
    action = get_action("notify-crm")
    assert (action.external, action.destination_name(), action.identity_fields) == (
        True,
        "crm",
        ("request_id",),
    )
    assert "notify-crm" in registry

    assert apply(tmp_path, file_text()) == "no changes\n"
    assert AuditEvent.objects.filter(kind__in=["destination_created", "http_action_created"]).count() == 2


def test_a_change_is_printed_field_by_field_and_gives_a_new_version(tmp_path, db):
    apply(tmp_path, file_text())
    before = get_action("notify-crm").version

    output = apply(tmp_path, file_text(action=ACTION | {"max_attempts": 3}))

    assert output == "changed: HTTP action notify-crm: max_attempts 5 -> 3\n"
    assert get_action("notify-crm").version != before
    assert AuditEvent.objects.filter(kind="http_action_changed").count() == 1


def test_a_dry_run_prints_and_changes_nothing(tmp_path, db):
    assert apply(tmp_path, file_text(), "--dry-run").startswith("would change: destination crm: created")
    assert not Destination.objects.exists()
    assert not HttpAction.objects.exists()
    with pytest.raises(UnknownAction):
        get_action("notify-crm")


@pytest.mark.parametrize(
    ("destination", "action", "problem"),
    [
        (
            DESTINATION | {"secret_env": "sk_live_123"},
            None,
            "destinations[0].secret_env: the name of an environment variable",
        ),
        (DESTINATION | {"base_url": "ftp://x"}, None, "destinations[0].base_url: an http:// or https:// URL"),
        (DESTINATION | {"error_code": "error.["}, None, "destinations[0].error_code: `error.[` does not compile"),
        (None, ACTION | {"destination": "nowhere"}, "http_actions[0].destination: 'nowhere' is not a destination"),
        (None, ACTION | {"name": "prepare-brief"}, "http_actions[0].name: prepare-brief is an action defined in code"),
        (
            None,
            ACTION | {"request": ACTION["request"] | {"path": "/c/{{ data.[ }}"}},
            "http_actions[0].request.path: `data.[` does not compile",
        ),
        (
            None,
            ACTION | {"identity_fields": ["email"]},
            "http_actions[0].identity_fields: email is not a field of the schema",
        ),
        (None, ACTION | {"normalisers": {}}, "http_actions[0].normalisers.request_id: required for the identity field"),
        (None, ACTION | {"normalisers": {"request_id": "lowercase"}}, "http_actions[0].normalisers.request_id: one of"),
        (
            None,
            ACTION | {"schema": {"type": "object", "properties": {"a": {"type": "nope"}}}},
            "http_actions[0].schema",
        ),
        (None, ACTION | {"lookup": {"repeat": True}}, "lookup.repeat: the destination honours no idempotency header"),
        (
            None,
            ACTION | {"response": {"outcomes": [{"when": "status == `409`", "outcome": "fine"}]}},
            "http_actions[0].response.outcomes[0].outcome: one of success, transient, permanent, ambiguous",
        ),
        (None, ACTION | {"max_attempts": 0}, "http_actions[0].max_attempts: more than 0"),
        (None, ACTION | {"ordering": "latest_wins"}, "ordering: latest_wins orders the versions of one request"),
        (
            None,
            ACTION | {"listing": {"path": "/n", "reference": "ref", "page_param": "p", "cursor_param": "c"}},
            "listing: pages by number (page_param) or by cursor (cursor_param), not both",
        ),
        (
            None,
            ACTION | {"listing": {"path": "/n", "reference": "ref", "cursor_param": "c"}},
            "listing: cursor_param and next_cursor go together",
        ),
        (None, ACTION | {"colour": "red"}, "http_actions[0].colour: unknown field"),
    ],
)
def test_a_broken_file_changes_nothing_and_says_where(tmp_path, db, destination, action, problem):
    with pytest.raises(CommandError) as refused:
        apply(tmp_path, file_text(destination, action))
    assert problem in str(refused.value)
    assert not Destination.objects.exists()
    assert not HttpAction.objects.exists()
    assert not AuditEvent.objects.exists()


def test_a_source_may_map_to_an_action_the_same_file_declares(tmp_path, workspace):
    source = {
        "slug": "crm-hooks",
        "workspace": "demo",
        "scheme": "github",
        "secret_env": "OPSCONSOLE_SOURCE_DEMO_CRM_HOOK",
        "rules": [{"event": "ping", "action": "notify-crm", "data": {"request_id": "hook.id", "amount": "`1`"}}],
    }
    document = yaml.safe_load(file_text()) | {"sources": [source]}

    output = apply(tmp_path, json.dumps(document))

    assert output.splitlines()[-1] == "changed: source crm-hooks: created"


def test_export_writes_what_apply_takes_back_unchanged(tmp_path, db):
    apply(tmp_path, file_text())
    out = StringIO()
    call_command("integrations", "export", stdout=out)
    exported = yaml.safe_load(out.getvalue())
    assert exported["destinations"][0]["secret_env"] == "CRM_TOKEN"
    assert exported["http_actions"][0]["request"] == ACTION["request"]

    assert apply(tmp_path, out.getvalue()) == "no changes\n"


def test_an_http_actions_data_is_checked_by_its_json_schema_field_by_field(tmp_path, db):
    apply(tmp_path, file_text())
    data, errors = get_action("notify-crm").validated({"amount": "ten", "extra": 1})
    assert data is None
    assert {error.field: error.message for error in errors} == {
        "data.request_id": "'request_id' is a required property",
        "data.amount": "'ten' is not of type 'integer'",
    }


@pytest.mark.slow
def test_tuning_a_destinations_limits_is_no_new_configuration_but_its_url_is(tmp_path, db):
    apply(tmp_path, file_text())
    before = get_action("notify-crm").configuration()

    apply(tmp_path, file_text(destination=DESTINATION | {"rate_limit_per_second": 5, "max_concurrency": 2}))
    assert get_action("notify-crm").configuration() == before  # a replay asks nobody to confirm a pace

    apply(tmp_path, file_text(destination=DESTINATION | {"base_url": "https://crm2.example.com/api"}))
    assert get_action("notify-crm").configuration()["destination"]["base_url"] == "https://crm2.example.com/api"
