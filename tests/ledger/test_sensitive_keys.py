"""A sensitive identity field (``send-welcome``'s email address) enters the key as a keyed hash:
keys in URLs, logs, the audit trail and the deliveries reveal nothing, and the same address is
still recognised as a duplicate."""

import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from django.conf import settings

from ledger.engine.processing import process_due_operations
from ledger.keys import hashed_component
from ledger.models import Attempt, AuditEvent, Delivery, Operation
from reconciliation.reconcile import reconcile_operation

ROOT = Path(__file__).resolve().parents[2]
EMAIL = "ann.lee@example.com"
WELCOME = {"email": EMAIL, "version": 1, "language": "en"}


def welcome(api, delivery_id="d-1", **data):
    return api.post("/api/v1/events", {"action": "send-welcome", "delivery_id": delivery_id, "data": WELCOME | data})


def revealing(text: str, email: str = EMAIL) -> bool:
    local = email.split("@")[0]
    return any(part in text for part in (email, email.replace("@", "%40"), local))


def test_it_keys_an_email_by_its_keyed_hash(api):
    response = welcome(api)

    assert response.status_code == 201
    key = response.json()["key"]
    hashed = hashed_component("demo", "email", EMAIL, secret=settings.OPSCONSOLE_KEY_SECRET)
    assert key == f"demo:{hashed}:v1:send-welcome"
    assert key.split(":")[1].startswith("h.")
    assert len(key.split(":")[1]) == 34
    assert not revealing(key)
    assert Operation.objects.get().payload["email"] == EMAIL  # kept, to be sent (and masked, and erasable)


def test_it_finds_the_operation_by_a_key_that_reveals_nothing_in_the_url(api):
    key = welcome(api).json()["key"]

    found = api.get(f"/api/v1/operations/{key}")

    assert found.status_code == 200
    assert found.json()["payload"] == {"email": "••••", "version": 1, "language": "en"}


def test_it_recognises_a_second_delivery_of_the_same_address_as_a_duplicate(api):
    first = welcome(api, "d-1")
    again = welcome(api, "d-2")
    composed = welcome(api, "d-3", email=unicodedata.normalize("NFD", "zoë@example.com"))
    decomposed_again = welcome(api, "d-4", email=unicodedata.normalize("NFC", "zoë@example.com"))

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["key"] == first.json()["key"]
    assert (composed.status_code, decomposed_again.status_code) == (201, 200)  # one text, two encodings
    assert Operation.objects.count() == 2


def test_it_gives_another_address_another_key(api):
    first = welcome(api, "d-1").json()["key"]
    other = welcome(api, "d-2", email="bob@example.com").json()["key"]
    conflicting = welcome(api, "d-3", language="fr")

    assert other != first
    assert conflicting.status_code == 409  # same address and version, other language: a conflict
    assert conflicting.json()["fields"] == ["language"]


def test_it_gives_the_same_address_another_hash_in_another_workspace():
    """Keys of two workspaces cannot be matched up to tell that one person is in both."""
    secret = settings.OPSCONSOLE_KEY_SECRET
    assert hashed_component("demo", "email", EMAIL, secret=secret) != hashed_component(
        "acme", "email", EMAIL, secret=secret
    )


KEY_IN_A_PROCESS = (
    "import django; django.setup(); from django.conf import settings; from ledger.actions import get_action; "
    "from ledger.keys import build_key; a = get_action('send-welcome'); "
    f"print(build_key('demo', a.name, [('email', {EMAIL!r}), ('version', 1)], sensitive=a.sensitive_fields, "
    "secret=settings.OPSCONSOLE_KEY_SECRET))"
)


def key_in_another_process(secret: str) -> str:
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "opsconsole.settings",
        "SECRET_KEY": "k",
        "OPSCONSOLE_KEY_SECRET": secret,
        "OPSCONSOLE_AUDIT_KEY": "ak",
    }
    env.pop("DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-c", KEY_IN_A_PROCESS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.slow
def test_it_gives_the_same_key_in_every_process_that_has_the_secret(api):
    key = welcome(api).json()["key"]

    assert key_in_another_process(settings.OPSCONSOLE_KEY_SECRET) == key
    assert key_in_another_process("another-secret") != key


@pytest.fixture
def sent_and_reconciled(workspace, standin, api):
    """A welcome whose answer was lost (unknown), then found by looking its reference up."""
    standin.fail_next({"kind": "drop_after_commit"})
    welcome(api)
    welcome(api, "d-2")  # a duplicate delivery
    welcome(api, "d-3", language="fr")  # a conflict
    process_due_operations(worker="w1")
    operation = Operation.objects.get()
    assert operation.state == "unknown"
    Operation.objects.filter(pk=operation.pk).update(next_attempt_at=None)
    operation.refresh_from_db()
    assert reconcile_operation(operation, asked_by_person=True) == "found"
    operation.refresh_from_db()
    assert operation.state == "succeeded"
    return operation


def test_the_destination_gets_the_address_but_the_reference_is_the_hashed_key(sent_and_reconciled, standin):
    [record] = standin.records(reference=sent_and_reconciled.key)

    assert record["payload"] == {"email": EMAIL, "language": "en"}
    assert not revealing(record["reference"])


def test_the_audit_trail_deliveries_and_attempts_hold_no_clear_address(sent_and_reconciled):
    rows = {
        "audit": AuditEvent.objects.values_list(),
        "deliveries": Delivery.objects.values_list(),
        "attempts": Attempt.objects.values_list(),
    }

    assert len(rows["audit"]) >= 5
    assert len(rows["deliveries"]) == 3
    assert len(rows["attempts"]) == 1
    for table, values in rows.items():
        text = " ".join(str(value) for row in values for value in row)
        assert not revealing(text), table
    assert {key for (key,) in Delivery.objects.values_list("key")} == {sent_and_reconciled.key}


def test_the_console_audit_trail_shows_a_key_that_reveals_nothing(sent_and_reconciled, client, person):
    client.force_login(person("boss", "admin"))  # who may see sensitive values: the key hides it anyway

    page = client.get("/console/audit/", {"key": sent_and_reconciled.key}).content.decode()

    assert page.count(sent_and_reconciled.key) >= 5
    assert not revealing(page)
