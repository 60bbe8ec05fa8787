"""A careless vendor for tests (issue 37, finding 3): the real stand-in as a destination with a
bearer key, whose ``echo_credential`` fault quotes the key back in every common form; an HTTP action
``file-record`` that every workspace may call there; and what counts as a leak of the key."""

import base64
import html
import re
from io import StringIO
from urllib.parse import quote

import pytest
import yaml
from django.core.management import call_command

from ledger.core import accounts
from ledger.intake.submit import submit_event
from ledger.models import Operation

SECRET = "sk_live_51Hq?Zx+k9~Tq=W8dR>>"
SECRET_ENV = "OPSCONSOLE_TEST_ECHO_VENDOR_KEY"


def forms_of(secret: str) -> list[str]:
    """Every form the stand-in echoes the credential in, as it writes them."""
    raw = secret.encode()
    b64, b64url = base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()
    return [
        secret,
        base64.b64encode(b"api:" + raw).decode(),
        b64,
        b64.rstrip("="),
        b64url,
        b64url.rstrip("="),
        quote(secret, safe=""),
        raw.hex(),
        raw.hex().upper(),
        secret[:12],
        "".join(f"\\u{ord(char):04x}" for char in secret),
    ]


FORMS = forms_of(SECRET)
# Any 8 characters in a row of the key's own forms: a fragment is a leak too. (Of the basic pair's
# encoding, the first 8 encode "api:" and 2 of the key's 28 bytes.)
RUNS = {form[i : i + 8].lower() for form in [FORMS[0], *FORMS[2:-1]] for i in range(len(form) - 7)}


def leaks(text: str) -> list[str]:
    """The forms, or runs of 8 characters of them, in ``text`` as stored or decoded."""
    decoded = re.sub(r"\\u([0-9a-fA-F]{4})", lambda escape: chr(int(escape[1], 16)), html.unescape(text)).lower()
    return [form for form in FORMS if form.lower() in text.lower()] + [run for run in RUNS if run in decoded]


def integrations(url: str) -> str:
    return yaml.safe_dump(
        {
            "destinations": [{"slug": "records-vendor", "base_url": url, "auth": "bearer", "secret_env": SECRET_ENV}],
            "http_actions": [
                {
                    "name": "file-record",
                    "destination": "records-vendor",
                    "schema": {
                        "type": "object",
                        "required": ["request_id"],
                        "properties": {"request_id": {"type": "string"}, "title": {"type": "string"}},
                    },
                    "identity_fields": ["request_id"],
                    "normalisers": {"request_id": "identifier"},
                    "fingerprint_fields": ["request_id"],
                    "max_attempts": 1,
                    "settle_after_seconds": 0,
                    "request": {
                        "method": "POST",
                        "path": "/records",
                        "body": {"reference": "{{ key }}", "payload": {"title": "{{ data.title }}"}},
                    },
                    "lookup": {"path": "/records?reference={{ key }}"},
                    "listing": {
                        "path": "/records?created_after={{ created_after }}&created_before={{ created_before }}",
                        "records": "records",
                        "reference": "reference",
                    },
                }
            ],
        },
        sort_keys=False,
    )


@pytest.fixture
def echoing_vendor(standin, tmp_path, monkeypatch, db):
    """The stand-in as a destination every workspace's ``file-record`` calls with a bearer key."""
    monkeypatch.setenv(SECRET_ENV, SECRET)
    path = tmp_path / "integrations.yaml"
    path.write_text(integrations(standin.url))
    call_command("integrations", "apply", str(path), stdout=StringIO())
    return standin


@pytest.fixture
def second_workspace(db):
    """A second workspace, "other", beside the ``workspace`` fixture's "demo"."""
    workspace, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    return workspace


def filed(workspace, request_id: str) -> Operation:
    raw = {"action": "file-record", "data": {"request_id": request_id, "title": "Quarterly report"}}
    result = submit_event(workspace=workspace, raw=raw, source="api")
    assert result.outcome == "accepted", result
    return result.operation
