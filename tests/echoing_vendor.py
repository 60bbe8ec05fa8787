"""A careless vendor for tests: the real stand-in as a destination with a
bearer key, whose ``echo_credential`` fault quotes the key back in every form a careless vendor
writes it in; an HTTP action ``file-record`` that every workspace may call there; and what counts as
a leak of the key."""

from io import StringIO

import pytest
import yaml
from django.core.management import call_command

from ledger.core import accounts
from ledger.intake.submit import submit_event
from ledger.models import Operation
from tests import credential_forms

SECRET = "sk_live_51Hq?Zx+k9~Tq=W8dR>>"
SECRET_ENV = "OPSCONSOLE_TEST_ECHO_VENDOR_KEY"


def leaks(text: str) -> list[str]:
    """Runs of 8 characters of the key in any of its forms, in ``text`` read every way a vendor may
    have encoded it (``tests.credential_forms.leaks``)."""
    return credential_forms.leaks(text, SECRET)


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
