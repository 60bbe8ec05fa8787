"""`manage.py integrations apply FILE --check-openapi [DESTINATION=]vendor.yaml`: a file whose
requests the vendor's OpenAPI document does not describe is refused, every difference listed, and
nothing is applied; one that matches is applied as without the check."""

from io import StringIO

import pytest
import yaml
from django.core.management import CommandError, call_command

from ledger.integrations import file as integrations_file
from ledger.models import AuditEvent, Destination, HttpAction
from tests.ledger.integrations.helpdesk_vendor import ADD_CONTACT, CREATE_TICKET, HELPDESK, changed, integrations


def apply(tmp_path, document: dict, *args) -> str:
    path = tmp_path / "integrations.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    out = StringIO()
    call_command("integrations", "apply", str(path), *args, stdout=out)
    return out.getvalue()


def refusal(tmp_path, document: dict, *args) -> list[str]:
    with pytest.raises(CommandError) as refused:
        apply(tmp_path, document, *args)
    assert not Destination.objects.exists()
    assert not HttpAction.objects.exists()
    assert not AuditEvent.objects.filter(kind__regex=r"^(destination|http_action)_").exists()
    first, *problems = str(refused.value).splitlines()
    assert first == "nothing changed:"
    return [problem.strip() for problem in problems]


def test_a_file_with_a_misspelt_body_field_is_refused_naming_the_field_and_nothing_is_applied(tmp_path, db):
    body = {**CREATE_TICKET["request"]["body"], "titel": "{{ data.title }}"}
    del body["title"]
    document = integrations(changed(CREATE_TICKET, body=body), ADD_CONTACT)

    problems = refusal(tmp_path, document, "--check-openapi", f"helpdesk={HELPDESK}")

    assert problems == [
        'http_actions[0] create-ticket: request body field "titel" is not in POST /tickets '
        "(additionalProperties false)",
        "http_actions[0] create-ticket: request body: 'title' is a required property (POST /tickets)",
    ]


def test_every_problem_of_every_action_is_listed(tmp_path, db):
    document = integrations(changed(CREATE_TICKET, method="PATCH"), changed(ADD_CONTACT, path="/contact"))

    problems = refusal(tmp_path, document, "--check-openapi", str(HELPDESK))

    assert problems == [
        f"http_actions[0] create-ticket: PATCH /tickets: {HELPDESK} has no PATCH on this path (it has GET, POST)",
        f"http_actions[1] add-contact: POST /contact: {HELPDESK} describes no such path (nearest: /contacts)",
    ]


def test_a_file_the_vendor_describes_is_applied(tmp_path, db):
    out = apply(tmp_path, integrations(CREATE_TICKET, ADD_CONTACT), "--check-openapi", f"helpdesk={HELPDESK}")

    assert out.splitlines() == [
        "changed: destination helpdesk: created",
        "changed: HTTP action create-ticket: created",
        "changed: HTTP action add-contact: created",
    ]
    assert set(HttpAction.objects.values_list("name", flat=True)) == {"create-ticket", "add-contact"}


def test_the_check_reads_the_plan_that_is_applied(tmp_path, db, monkeypatch):
    """One plan: what the vendor's document checked is what is saved (a second plan could see
    another moment's rows)."""
    plans = []
    planned = integrations_file.plan
    monkeypatch.setattr(integrations_file, "plan", lambda document: plans.append(planned(document)) or plans[-1])

    apply(tmp_path, integrations(CREATE_TICKET), "--check-openapi", f"helpdesk={HELPDESK}")

    assert len(plans) == 1
    assert HttpAction.objects.get().name == "create-ticket"


def test_a_dry_run_is_checked_too(tmp_path, db):
    body = {**ADD_CONTACT["request"]["body"], "seats": "two"}

    problems = refusal(
        tmp_path, integrations(changed(ADD_CONTACT, body=body)), "--dry-run", "--check-openapi", str(HELPDESK)
    )

    assert problems == [
        "http_actions[0] add-contact: request body value 'two' is not of type integer in POST /contacts"
    ]


def test_a_bad_document_is_refused_with_a_clear_error_not_a_traceback(tmp_path, db):
    bad = tmp_path / "vendor.yaml"
    bad.write_text('openapi: 3.0.3\ninfo: {version: "1"}\npaths:\n  /x:\n    post: {}\n')

    problems = refusal(tmp_path, integrations(CREATE_TICKET), "--check-openapi", f"helpdesk={bad}")

    assert problems == [
        f'{bad}: not a valid OpenAPI document: info: "title" is a required property',
        f'{bad}: not a valid OpenAPI document: paths./x.post: "responses" is a required property',
    ]


def test_a_document_that_cannot_be_read_is_named(tmp_path, db):
    with pytest.raises(CommandError) as refused:
        apply(tmp_path, integrations(CREATE_TICKET), "--check-openapi", f"helpdesk={tmp_path / 'missing.yaml'}")

    assert str(refused.value) == f"cannot read {tmp_path / 'missing.yaml'}: No such file or directory"
    assert not HttpAction.objects.exists()


def test_two_documents_for_one_destination_are_refused(tmp_path, db):
    with pytest.raises(CommandError) as refused:
        apply(tmp_path, integrations(CREATE_TICKET), "--check-openapi", str(HELPDESK), "--check-openapi", str(HELPDESK))

    assert str(refused.value) == "--check-openapi: two documents for the destination"
