"""An integrations file checked against a vendor's own OpenAPI document (openapi/helpdesk.yaml):
each HTTP action's method, path, body, lookup and listing, every difference named, before anything
is applied. The vendor's tickets refuse undeclared fields; its contacts take a form and allow them."""

import copy

import pytest
import yaml

from ledger.integrations import openapi_check
from ledger.integrations.file import IntegrationsError, plan
from ledger.integrations.openapi_sample import sample
from ledger.models import Destination, HttpAction
from tests.ledger.integrations.helpdesk_vendor import (
    ADD_CONTACT,
    CREATE_TICKET,
    HELPDESK,
    HELPDESK_DESTINATION,
    changed,
    integrations,
)


def vendor(text: str | None = None, name: str = "helpdesk.yaml") -> openapi_check.VendorDocument:
    return openapi_check.load(HELPDESK.read_text() if text is None else text, name=name)


def problems(document: dict, vendors=None) -> list[str]:
    try:
        openapi_check.check(plan(document), {"helpdesk": vendor()} if vendors is None else vendors)
    except IntegrationsError as refused:
        return refused.problems
    return []


def test_a_file_as_the_vendor_describes_it_passes(db):
    assert problems(integrations(CREATE_TICKET, ADD_CONTACT)) == []


def test_a_misspelt_body_field_is_named_where_the_schema_refuses_undeclared_fields(db):
    body = {**CREATE_TICKET["request"]["body"], "titel": "{{ data.title }}"}
    del body["title"]

    found = problems(integrations(changed(CREATE_TICKET, body=body)))

    assert found == [
        'http_actions[0] create-ticket: request body field "titel" is not in POST /tickets '
        "(additionalProperties false)",
        "http_actions[0] create-ticket: request body: 'title' is a required property (POST /tickets)",
    ]


def test_a_body_field_the_schema_does_not_declare_is_named_even_where_the_schema_allows_it(db):
    """The vendor would take the request and drop the field: how the misspelt field failed."""
    body = {**ADD_CONTACT["request"]["body"], "nick_name": "ann"}
    nested = {**CREATE_TICKET["request"]["body"], "requester": {"mail": "{{ data.email }}"}}

    found = problems(integrations(changed(CREATE_TICKET, body=nested), changed(ADD_CONTACT, body=body)))

    assert found == [
        'http_actions[0] create-ticket: request body field "requester.mail" is not declared by POST /tickets '
        "(its schema allows undeclared fields, which the vendor may drop without a word)",
        'http_actions[1] add-contact: request body field "nick_name" is not declared by POST /contacts '
        "(its schema allows undeclared fields, which the vendor may drop without a word)",
    ]


def test_a_map_the_schema_declares_takes_any_field_name(db):
    body = {**ADD_CONTACT["request"]["body"], "metadata": {"anything": "{{ key }}", "else": "x"}}

    assert problems(integrations(changed(ADD_CONTACT, body=body))) == []


def test_the_body_is_rendered_from_a_sample_of_the_actions_data_so_types_are_compared(db):
    """`{{ data.amount }}` is an integer (the data schema says so); the title is text, which the
    vendor's integer field does not take; an enum value the vendor lacks is named."""
    body = {**CREATE_TICKET["request"]["body"], "amount_cents": "{{ data.title }}", "priority": "urgent"}

    found = problems(integrations(changed(CREATE_TICKET, body=body)))

    assert found == [
        "http_actions[0] create-ticket: request body field \"amount_cents\": 'sample' is not of type 'integer' "
        "(POST /tickets)",
        "http_actions[0] create-ticket: request body field \"priority\": 'urgent' is not one of "
        "['low', 'normal', 'high'] (POST /tickets)",
    ]


def test_a_form_body_is_read_as_text_cast_to_the_vendors_types(db):
    """A form sends text: `seats=2` is an integer to the vendor, `seats=two` is not."""
    literal = {**ADD_CONTACT["request"]["body"], "seats": "2"}
    wrong = {**ADD_CONTACT["request"]["body"], "seats": "two"}

    assert problems(integrations(changed(ADD_CONTACT, body=literal))) == []
    assert problems(integrations(changed(ADD_CONTACT, body=wrong))) == [
        "http_actions[0] add-contact: request body value 'two' is not of type integer in POST /contacts"
    ]


def test_a_body_in_a_content_type_the_operation_does_not_take_is_named(db):
    found = problems(integrations(changed(ADD_CONTACT, body_format="json")))

    assert found == [
        "http_actions[0] add-contact: POST /contacts takes application/x-www-form-urlencoded, "
        "not a json body (application/json)"
    ]


def test_a_missing_body_and_a_body_where_none_is_taken_are_named(db):
    without = copy.deepcopy(CREATE_TICKET)
    del without["request"]["body"]
    lookup_by_post = changed(CREATE_TICKET, method="GET")

    assert problems(integrations(without)) == [
        "http_actions[0] create-ticket: POST /tickets requires a request body, and the request has none"
    ]
    assert problems(integrations(lookup_by_post)) == [
        "http_actions[0] create-ticket: GET /tickets takes no request body"
    ]


@pytest.mark.parametrize(
    ("request_change", "problem"),
    [
        ({"path": "/ticket"}, "POST /ticket: helpdesk.yaml describes no such path (nearest: /tickets)"),
        ({"method": "PUT"}, "PUT /tickets: helpdesk.yaml has no PUT on this path (it has GET, POST)"),
        (
            {"path": "/tickets/{{ data.request_id }}/close"},
            "POST /tickets/sample/close: helpdesk.yaml describes no such path",
        ),
    ],
)
def test_a_wrong_method_or_path_is_named(db, request_change, problem):
    found = problems(integrations(changed(CREATE_TICKET, **request_change)))

    assert found == [f"http_actions[0] create-ticket: {problem}"]


def test_a_path_template_matches_the_rendered_path(db):
    action = changed(CREATE_TICKET, method="GET", path="/tickets/{{ data.request_id }}")
    del action["request"]["body"]

    assert problems(integrations(action)) == []


def test_the_base_path_of_the_destination_is_compared_with_the_documents_servers_not_its_host(db):
    """A mock on another host serves the same API; a base path the vendor does not serve is wrong."""
    mock = HELPDESK_DESTINATION | {"base_url": "http://127.0.0.1:4010/v1"}
    elsewhere = HELPDESK_DESTINATION | {"base_url": "https://helpdesk.example.com/api"}

    assert problems(integrations(ADD_CONTACT, destinations=[mock])) == []
    assert problems(integrations(ADD_CONTACT, destinations=[elsewhere])) == [
        "http_actions[0] add-contact: POST /contacts: the destination's base_url has the path /api, "
        "but helpdesk.yaml serves /contacts under /v1"
    ]


def test_the_lookup_and_listing_paths_exist_and_send_only_declared_query_parameters(db):
    """A vendor ignores a filter it does not know, and a lookup by it would list every ticket."""
    action = copy.deepcopy(CREATE_TICKET)
    action["lookup"] = {"path": "/tickets?reference={{ key }}"}
    action["listing"] = {"path": "/records?created_after={{ created_after }}", "reference": "source_key"}

    found = problems(integrations(action))

    assert found == [
        'http_actions[0] create-ticket: lookup: query parameter "reference" is not a parameter of GET /tickets',
        "http_actions[0] create-ticket: listing: GET /records: helpdesk.yaml describes no such path",
    ]


def test_a_caller_action_has_only_its_lookup_and_listing_checked(db):
    """Its caller sends the request, so there is none to compare; the lookup and listing are ours."""
    action = {key: value for key, value in copy.deepcopy(CREATE_TICKET).items() if key != "request"}
    action |= {"name": "open-ticket", "performed_by": "caller"}
    action["lookup"] = {"path": "/tickets?reference={{ key }}", "found": "tickets"}

    assert problems(integrations(action)) == [
        'http_actions[0] open-ticket: lookup: query parameter "reference" is not a parameter of GET /tickets',
    ]


def test_only_the_actions_of_the_destination_the_document_describes_are_checked(db):
    other = HELPDESK_DESTINATION | {"slug": "crm"}
    crm_action = changed(CREATE_TICKET, path="/no/such/path") | {"name": "notify-crm", "destination": "crm"}

    assert problems(integrations(CREATE_TICKET, crm_action, destinations=[HELPDESK_DESTINATION, other])) == []


def test_a_document_without_its_destination_is_the_files_one_destination(db):
    assert problems(integrations(CREATE_TICKET), {None: vendor()}) == []


def test_a_document_without_its_destination_is_refused_when_the_file_calls_several(db):
    other = HELPDESK_DESTINATION | {"slug": "crm"}
    crm_action = CREATE_TICKET | {"name": "notify-crm", "destination": "crm"}

    found = problems(
        integrations(CREATE_TICKET, crm_action, destinations=[HELPDESK_DESTINATION, other]), {None: vendor()}
    )

    assert found == [
        "helpdesk.yaml: name the destination it describes (DESTINATION=helpdesk.yaml): the file's HTTP actions "
        "call crm, helpdesk"
    ]


def test_a_document_for_a_destination_no_action_calls_is_refused(db):
    assert problems(integrations(CREATE_TICKET), {"helpdsk": vendor()}) == [
        "helpdesk.yaml: no HTTP action of the file calls destination helpdsk"
    ]


def test_checking_applies_nothing(db):
    problems(integrations(CREATE_TICKET))

    assert not Destination.objects.exists()
    assert not HttpAction.objects.exists()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("openapi: [\n", "x.yaml: not YAML or JSON: while parsing a flow node did not find expected node content"),
        ("- a list\n", "x.yaml: not an OpenAPI document (it holds no mapping)"),
        ("info: {title: a}\n", "x.yaml: not an OpenAPI document (no `openapi: 3.x` field)"),
        (
            'swagger: "2.0"\ninfo: {title: a, version: "1"}\npaths: {}\n',
            "x.yaml: a Swagger 2.0 document, which is not read: convert it to OpenAPI 3",
        ),
        (
            'openapi: 3.0.3\ninfo: {title: a, version: "1"}\npaths:\n  /x: {$ref: "#/components/pathItems/x"}\n',
            "x.yaml: the reference /components/pathItems/x leads nowhere in the document",
        ),
        (
            'openapi: 3.0.3\ninfo: {version: "1"}\npaths: {}\n',
            'x.yaml: not a valid OpenAPI document: info: "title" is a required property',
        ),
    ],
)
def test_a_bad_document_is_refused_saying_what_is_wrong(text, problem):
    with pytest.raises(IntegrationsError) as refused:
        vendor(text, name="x.yaml")

    assert refused.value.problems[0].startswith(problem)


def test_a_reference_outside_the_document_is_named_not_followed(db):
    text = HELPDESK.read_text().replace("#/components/schemas/NewTicket", "https://example.com/ticket.yaml")

    found = problems(integrations(CREATE_TICKET), {"helpdesk": vendor(text)})

    assert found == [
        "http_actions[0] create-ticket: helpdesk.yaml: the reference https://example.com/ticket.yaml leads nowhere "
        "in the document (a reference to another file or a URL is not followed)"
    ]


def test_an_openapi_3_1_document_is_read_too(db):
    document = yaml.safe_load(HELPDESK.read_text())
    document["openapi"] = "3.1.0"
    document["components"]["schemas"]["NewTicket"]["properties"]["amount_cents"] = {"type": ["integer", "null"]}
    body = {**CREATE_TICKET["request"]["body"], "titel": "x"}

    found = problems(integrations(changed(CREATE_TICKET, body=body)), {"helpdesk": vendor(yaml.safe_dump(document))})

    assert found == [
        'http_actions[0] create-ticket: request body field "titel" is not in POST /tickets (additionalProperties false)'
    ]


def test_a_sample_keeps_to_each_fields_type_format_and_bounds():
    schema = {
        "type": "object",
        "properties": {
            "count": {"type": "integer", "minimum": 3},
            "ratio": {"type": "number", "maximum": 0.5},
            "email": {"type": "string", "format": "email"},
            "code": {"type": "string", "minLength": 8, "maxLength": 8},
            "level": {"enum": ["gold", "silver"]},
            "flag": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "note": {"type": ["null", "string"]},
            "nested": {"properties": {"n": {"type": "integer", "default": 7}}},
        },
    }

    assert sample(schema) == {
        "count": 3,
        "ratio": 0.5,
        "email": "sample@example.com",
        "code": "samplexx",
        "level": "gold",
        "flag": True,
        "tags": ["sample", "sample"],
        "note": "sample",
        "nested": {"n": 7},
    }
