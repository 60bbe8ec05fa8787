"""The audit chain is keyed (HMAC-SHA256 under ``OPSCONSOLE_AUDIT_KEY``, a key the database never
holds), so whoever owns the database cannot rewrite it and recompute the hashes after the edit;
TRUNCATE of the audit table is refused by a statement trigger; keys rotate with an id on each event,
and events hashed before keys (v1, unkeyed SHA-256) keep verifying."""

import hashlib
import hmac
import json
import subprocess
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction

from ledger.core import audit_mac, transitions
from ledger.core.rows import model_row
from ledger.engine.processing import process_due_operations
from ledger.models import AuditEvent
from ledger.people import pause
from tests.conftest import psql_program
from tests.faults.qcluster import database_url
from tests.ledger.conftest import submit_brief


def verify() -> str:
    out = StringIO()
    call_command("verify_audit", "--no-heads", stdout=out)  # the chains alone (the heads: test_audit_trust.py)
    return out.getvalue()


def make_history(workspace, *, requests=("R-1", "R-2", "R-3")):
    for request_id in requests:
        submit_brief(workspace, request_id=request_id)
    process_due_operations(worker="w1")
    pause.set_paused(paused=True, actor="alice", reason="deploy")


# The attack of the review: with the triggers off, edit an event, then walk the rest of its chain
# recomputing each hash by the published recipe (ledger.core.audit_mac). The attacker has no audit
# key: it hashes under a guess. ``downgrade`` marks each rewritten event as hashed without a key
# (the first scheme), which needs no key at all.
def rewrite_from(target: AuditEvent, *, downgrade: bool) -> None:
    previous = target.prev_hash
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute("UPDATE ledger_auditevent SET message = 'nothing to see' WHERE id = %s", [target.pk])
        for event in AuditEvent.objects.filter(workspace_id=target.workspace_id, id__gte=target.pk).order_by("id"):
            row = model_row(event) | {"prev_hash": previous}
            previous = audit_mac.digest(row, None if downgrade else "a-guess")
            cursor.execute(
                "UPDATE ledger_auditevent SET prev_hash = %s, hash = %s, hash_key = %s WHERE id = %s",
                [row["prev_hash"], previous, "" if downgrade else event.hash_key, event.pk],
            )
        cursor.execute("SET LOCAL session_replication_role = DEFAULT")


@pytest.mark.parametrize("downgrade", [False, True], ids=["recomputed", "recomputed-unkeyed"])
def test_an_edit_with_every_later_hash_recomputed_no_longer_verifies(workspace, downgrade):
    make_history(workspace)
    target = AuditEvent.objects.filter(workspace=workspace).order_by("id")[2]

    rewrite_from(target, downgrade=downgrade)

    assert AuditEvent.objects.get(pk=target.pk).message == "nothing to see"
    problem = "hashed without a key after keyed events" if downgrade else "was changed after it was written"
    with pytest.raises(CommandError, match=f"Audit chain broken: event {target.pk} .*{problem}"):
        verify()


def test_new_events_carry_the_current_key_id_and_verify(workspace, settings):
    make_history(workspace)

    events = list(AuditEvent.objects.filter(workspace=workspace))
    assert events
    assert {event.hash_key for event in events} == {settings.OPSCONSOLE_AUDIT_KEY_ID}
    assert verify().splitlines()[-1].startswith("Audit trail intact:")


def test_events_under_two_keys_verify_after_a_rotation(workspace, settings):
    started = {settings.OPSCONSOLE_AUDIT_KEY_ID: settings.OPSCONSOLE_AUDIT_KEY}  # the workspace's own event
    settings.OPSCONSOLE_AUDIT_KEY, settings.OPSCONSOLE_AUDIT_KEY_ID = "first-key-0123456789", "k1"
    settings.OPSCONSOLE_AUDIT_OLD_KEYS = started
    make_history(workspace, requests=("R-1", "R-2"))

    settings.OPSCONSOLE_AUDIT_KEY, settings.OPSCONSOLE_AUDIT_KEY_ID = "second-key-9876543210", "k2"
    settings.OPSCONSOLE_AUDIT_OLD_KEYS = started | {"k1": "first-key-0123456789"}
    make_history(workspace, requests=("R-3", "R-4"))

    key_ids = list(AuditEvent.objects.filter(workspace=workspace).order_by("id").values_list("hash_key", flat=True))
    # The workspace's own two first (created, its token), under the key it started with.
    assert key_ids[2] == "k1"
    assert key_ids[-1] == "k2"
    assert key_ids[2:] == sorted(key_ids[2:])
    assert verify().splitlines()[-1].startswith("Audit trail intact:")

    settings.OPSCONSOLE_AUDIT_OLD_KEYS = started
    with pytest.raises(CommandError, match="is hashed under audit key id 'k1', which is not configured"):
        verify()


def test_a_key_with_the_same_id_but_another_secret_does_not_verify(workspace, settings):
    make_history(workspace)
    settings.OPSCONSOLE_AUDIT_KEY = "not-the-key-it-was-written-with"

    with pytest.raises(CommandError, match="was changed after it was written"):
        verify()


@pytest.mark.parametrize("key", ["k" * 32, "clé-ünïcode-✓", "with=equals/and+plus"])
def test_events_of_any_text_verify_under_the_key_they_were_written_with_alone(workspace, settings, key):
    """Appending and verifying hash an event the same way under any key (``ledger.core.audit_mac``,
    in this process both times), and another secret under the same id finds every event changed."""
    started = {settings.OPSCONSOLE_AUDIT_KEY_ID: settings.OPSCONSOLE_AUDIT_KEY}  # the workspace's own event
    settings.OPSCONSOLE_AUDIT_KEY, settings.OPSCONSOLE_AUDIT_KEY_ID = key, "k9"
    settings.OPSCONSOLE_AUDIT_OLD_KEYS = started
    for message in ["", "plain", "Ünïcödé and ✓ and 𝄞", 'line\nbreak\ttab "q" \\', "x" * 500]:
        transitions.record_audit_event(actor="alice@example", kind="note", workspace=workspace, message=message)

    assert verify().splitlines()[-1].startswith("Audit trail intact:")
    settings.OPSCONSOLE_AUDIT_KEY = key + "."
    with pytest.raises(CommandError, match="was changed after it was written"):
        verify()


def test_the_database_refuses_an_event_without_a_mac(workspace):
    """Every event is sealed in the application: one inserted without a MAC (as a writer without the
    key would, in the unkeyed form of before keys) is refused by the table's trigger."""
    event = AuditEvent(workspace_id=workspace.pk, actor="a", kind="note", created_at=datetime(2026, 12, 1, tzinfo=UTC))
    for hash_, key_id in [("", "1"), (audit_mac.digest(model_row(event), None), "")]:
        row = model_row(event) | {"id": 10**9, "hash": hash_, "hash_key": key_id}
        with pytest.raises(Exception, match="has no MAC under an audit key"), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO ledger_auditevent SELECT * FROM jsonb_populate_record(NULL::ledger_auditevent, %s)",
                    [json.dumps(row, default=str)],
                )


# Keys of 1 to 200 bytes: shorter than SHA-256's 64-byte block, equal to it, longer, in ASCII and in
# UTF-8 of more bytes than characters.
KEY_LENGTHS = ["k", "k" * 63, "k" * 64, "k" * 65, "k" * 200, "é" * 31 + "k" * 2, "é" * 32, "é" * 32 + "k", "✓" * 22]


@pytest.mark.parametrize("key", KEY_LENGTHS, ids=[f"{len(key)}-chars-{len(key.encode())}-bytes" for key in KEY_LENGTHS])
def test_an_event_is_sealed_with_pythons_hmac_of_its_encoding(workspace, settings, key):
    """An event's hash is ``hmac.new(key, encoding, sha256)`` of its columns as the database keeps
    them, under any key, and verifies; a key one character longer does not."""
    started = {settings.OPSCONSOLE_AUDIT_KEY_ID: settings.OPSCONSOLE_AUDIT_KEY}
    settings.OPSCONSOLE_AUDIT_KEY, settings.OPSCONSOLE_AUDIT_KEY_ID = key, "k9"
    settings.OPSCONSOLE_AUDIT_OLD_KEYS = started
    event = transitions.record_audit_event(actor="alice", kind="note", workspace=workspace, message="ünï ✓")

    stored = AuditEvent.objects.get(pk=event.pk)
    expected = hmac.new(key.encode(), audit_mac.encoding(model_row(stored)), hashlib.sha256).hexdigest()
    assert (stored.hash, stored.hash_key) == (expected, "k9")
    assert verify().splitlines()[-1].startswith("Audit trail intact:")
    settings.OPSCONSOLE_AUDIT_KEY = key + "k"
    with pytest.raises(CommandError, match="was changed after it was written"):
        verify()


@pytest.mark.django_db(transaction=True)
def test_truncate_of_the_audit_table_is_refused_even_to_its_owner(workspace):
    """psql as the database's owner (the tests' superuser): a plain TRUNCATE is refused by trigger."""
    make_history(workspace)
    before = AuditEvent.objects.count()

    result = subprocess.run(
        [psql_program(), database_url(), "-v", "ON_ERROR_STOP=1", "-c", "TRUNCATE ledger_auditevent"],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode != 0
    assert "ledger_auditevent is append-only: TRUNCATE refused" in result.stderr
    assert AuditEvent.objects.count() == before
