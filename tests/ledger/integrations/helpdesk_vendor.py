"""A helpdesk vendor's OpenAPI document (openapi/helpdesk.yaml) and an integrations file whose HTTP
actions it describes, for the tests of ``integrations apply --check-openapi``."""

import copy
from pathlib import Path

HELPDESK = Path(__file__).parent / "openapi" / "helpdesk.yaml"

CREATE_TICKET = {
    "name": "create-ticket",
    "destination": "helpdesk",
    "schema": {
        "type": "object",
        "properties": {
            "request_id": {"type": "string"},
            "title": {"type": "string"},
            "amount": {"type": "integer", "minimum": 100},
            "email": {"type": "string", "format": "email"},
        },
        "required": ["request_id", "title"],
    },
    "identity_fields": ["request_id"],
    "normalisers": {"request_id": "identifier"},
    "fingerprint_fields": ["request_id", "title"],
    "request": {
        "method": "POST",
        "path": "/tickets",
        "body": {
            "title": "{{ data.title }}",
            "source_key": "{{ key }}",
            "priority": "normal",
            "amount_cents": "{{ data.amount }}",
            "requester": {"email": "{{ data.email }}"},
        },
    },
    "lookup": {"path": "/tickets?source_key={{ key }}"},
    "listing": {"path": "/tickets?created_after={{ created_after }}", "reference": "source_key"},
}
ADD_CONTACT = {
    "name": "add-contact",
    "destination": "helpdesk",
    "schema": {
        "type": "object",
        "properties": {"email": {"type": "string", "format": "email"}, "seats": {"type": "integer"}},
        "required": ["email"],
    },
    "identity_fields": ["email"],
    "normalisers": {"email": "email_address"},
    "fingerprint_fields": ["email"],
    "request": {
        "method": "POST",
        "path": "/contacts",
        "body_format": "form",
        "body": {"email": "{{ data.email }}", "seats": "{{ data.seats }}", "metadata": {"source_key": "{{ key }}"}},
    },
}
HELPDESK_DESTINATION = {"slug": "helpdesk", "base_url": "https://helpdesk.example.com/v1", "auth": "none"}


def integrations(*actions, destinations=(HELPDESK_DESTINATION,)) -> dict:
    return {"destinations": list(destinations), "http_actions": list(actions)}


def changed(action: dict, **request) -> dict:
    action = copy.deepcopy(action)
    action["request"].update(request)
    return action
