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
from django.db import connection

from ledger.core import audit_chain, pause, transitions
from ledger.core.rows import model_row
from ledger.engine.processing import process_due_operations
from ledger.models import AuditEvent
from tests.conftest import psql_program
from tests.faults.qcluster import database_url
from tests.ledger.conftest import submit_brief


def verify() -> str:
    out = StringIO()
    call_command("verify_audit", stdout=out)
    return out.getvalue()


def make_history(workspace, *, requests=("R-1", "R-2", "R-3")):
    for request_id in requests:
        submit_brief(workspace, request_id=request_id)
    process_due_operations(worker="w1")
    pause.set_paused(paused=True, actor="alice", reason="deploy")


# The attack of the review: with the triggers off, edit an event, then walk the rest of its chain
# recomputing each hash with the database's own ledger_audit_hash. The attacker has no audit key: it
# passes the pads of a guess (ignored by an unkeyed function). ``downgrade`` also marks each
# rewritten event as hashed without a key (the first scheme), which needs no key at all.
REWRITE = """
DO $$
DECLARE
    e record;
    previous text;
BEGIN
    SET LOCAL session_replication_role = replica;
    UPDATE ledger_auditevent SET message = 'nothing to see' WHERE id = %(target)s;
    SELECT prev_hash INTO previous FROM ledger_auditevent WHERE id = %(target)s;
    FOR e IN SELECT * FROM ledger_auditevent WHERE workspace_id = %(workspace)s AND id >= %(target)s ORDER BY id LOOP
        UPDATE ledger_auditevent SET prev_hash = previous,
            hash = ledger_audit_hash(to_jsonb(e) || jsonb_build_object('prev_hash', previous, %(guess)s)
                                     || CASE WHEN %(downgrade)s THEN '{"hash_key": ""}'::jsonb ELSE '{}' END)
            %(set_downgrade)s
        WHERE id = e.id RETURNING hash INTO previous;
    END LOOP;
END
$$;
"""


def rewrite_from(target: AuditEvent, *, downgrade: bool) -> None:
    ipad, opad = audit_chain.hmac_pads("a-guess")
    sql = (
        REWRITE.replace("%(target)s", str(target.pk))
        .replace("%(workspace)s", str(target.workspace_id))
        .replace("%(guess)s", f"'audit_ipad', '{ipad}', 'audit_opad', '{opad}'")
        .replace("%(downgrade)s", "true" if downgrade else "false")
        .replace("%(set_downgrade)s", ", hash_key = ''" if downgrade else "")
    )
    with connection.cursor() as cursor:
        cursor.execute(sql)


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
    assert events and {event.hash_key for event in events} == {settings.OPSCONSOLE_AUDIT_KEY_ID}
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
    assert key_ids[1] == "k1" and key_ids[-1] == "k2" and key_ids[1:] == sorted(key_ids[1:])
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
    """Appending and verifying hash an event the same way under any key (the database's
    ledger_audit_hash, given the key as ``audit_chain.key_fields`` sends it), and another secret
    under the same id finds every event changed."""
    started = {settings.OPSCONSOLE_AUDIT_KEY_ID: settings.OPSCONSOLE_AUDIT_KEY}  # the workspace's own event
    settings.OPSCONSOLE_AUDIT_KEY, settings.OPSCONSOLE_AUDIT_KEY_ID = key, "k9"
    settings.OPSCONSOLE_AUDIT_OLD_KEYS = started
    for message in ["", "plain", "Ünïcödé and ✓ and 𝄞", 'line\nbreak\ttab "q" \\', "x" * 500]:
        transitions.record_audit_event(actor="alice@example", kind="note", workspace=workspace, message=message)

    assert verify().splitlines()[-1].startswith("Audit trail intact:")
    settings.OPSCONSOLE_AUDIT_KEY = key + "."
    with pytest.raises(CommandError, match="was changed after it was written"):
        verify()


@pytest.mark.parametrize("missing", [("audit_ipad",), ("audit_opad",), ("audit_ipad", "audit_opad")])
def test_the_database_refuses_a_keyed_event_without_its_key(workspace, missing):
    event = AuditEvent(workspace_id=workspace.pk, actor="a", kind="note")
    row = {**audit_chain.keyed(model_row(event)), "created_at": "2026-12-01T00:00:00Z"}
    for name in missing:
        del row[name]
    with pytest.raises(Exception, match="without its key"), connection.cursor() as cursor:
        cursor.execute("SELECT ledger_audit_hash(%s::jsonb)", [json.dumps(row)])


# Keys of 1 to 200 bytes: shorter than SHA-256's 64-byte block (zero-filled), equal to it, longer
# (hashed first), in ASCII and in UTF-8 of more bytes than characters.
KEY_LENGTHS = ["k", "k" * 63, "k" * 64, "k" * 65, "k" * 200, "é" * 31 + "k" * 2, "é" * 32, "é" * 32 + "k", "✓" * 22]


@pytest.mark.parametrize("key", KEY_LENGTHS, ids=[f"{len(key)}-chars-{len(key.encode())}-bytes" for key in KEY_LENGTHS])
def test_the_database_hmac_from_the_pads_is_pythons_hmac(workspace, key):
    """What ledger_audit_hash computes from the pads Python sends, with the built-in sha256() alone
    (no pgcrypto), is byte for byte ``hmac.new(key, message, sha256)``: the message being the
    event's encoding, read back from the database, and, the same way, an arbitrary byte string."""
    ipad, opad = audit_chain.hmac_pads(key)
    assert len(bytes.fromhex(ipad)) == len(bytes.fromhex(opad)) == 64
    event = AuditEvent(
        workspace_id=workspace.pk,
        actor="alice",
        kind="note",
        message="ünï ✓",
        created_at=datetime(2026, 12, 1, 9, 5, 55, 239842, tzinfo=UTC),
        hash_key="k9",
    )
    row = {**model_row(event), "hash_key": "k9", "audit_ipad": ipad, "audit_opad": opad}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ledger_audit_hash(%s::jsonb), ledger_audit_encoding(%s::jsonb)", [json.dumps(row, default=str)] * 2
        )
        digest, encoding = cursor.fetchone()
        assert digest == hmac.new(key.encode(), bytes(encoding), hashlib.sha256).hexdigest()
        message = bytes(range(256)) * 3
        cursor.execute(
            "SELECT encode(sha256(decode(%s, 'hex') || sha256(decode(%s, 'hex') || %s)), 'hex')", [opad, ipad, message]
        )
        assert cursor.fetchone()[0] == hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


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
