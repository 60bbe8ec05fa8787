"""The audit trail against whoever owns its database: the attacks of the review, each made
through raw psql as the owner (triggers off) or as the serving role, then ``manage.py verify_audit``
run as production runs it, with no flag: it holds the database to the last exported heads
(OPSCONSOLE_AUDIT_HEADS_TO) and must exit non-zero naming the event or the chain.

And the key itself: over a day of appends and a verification, the server's statement log (every
statement, with its parameters) holds neither the key nor anything a fixed transformation of it
gives (its HMAC pads, its hex, its base64, its SHA-256)."""

import base64
import hashlib
import os
import re
import subprocess
import sys
import uuid
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection

from ledger.core import accounts, transitions
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_batch
from ledger.models import AuditEvent
from ledger.people import pause
from tests.conftest import psql_program
from tests.faults.qcluster import PROJECT_DIR, database_url
from tests.ledger.conftest import submit_brief
from tests.ledger.management.test_serving_role import psql, serving_role  # noqa: F401 (serving_role: a fixture)

# Each attack runs psql and verify_audit as processes of their own: seconds a test.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# The attacker's own copy of the published recipe (docs/operations.md), in SQL: what an owner
# without the key can compute. ``hashed`` is the unkeyed SHA-256 of an event's encoding.
RECIPE = """
CREATE FUNCTION pg_temp.f(v text) RETURNS text LANGUAGE sql AS
    $$ SELECT octet_length(coalesce(v, ''))::text || ':' || coalesce(v, '') $$;
CREATE FUNCTION pg_temp.hashed(e ledger_auditevent, previous text) RETURNS text LANGUAGE sql AS $$
    SELECT encode(sha256(convert_to(
        pg_temp.f(previous) || pg_temp.f(e.workspace_id::text) || pg_temp.f(e.operation_id::text)
        || pg_temp.f(e.attempt_id::text) || pg_temp.f(e.actor) || pg_temp.f(e.kind) || pg_temp.f(e.from_state)
        || pg_temp.f(e.to_state) || pg_temp.f(e.error_category) || pg_temp.f(e.message)
        || pg_temp.f((extract(epoch FROM e.created_at) * 1000000)::bigint::text)
        || CASE WHEN e.times IS NULL THEN '' ELSE pg_temp.f(e.times::text) END, 'UTF8')), 'hex') $$;
"""


def as_owner(sql: str) -> None:
    """Raw psql as the database's owner, every (non-ALWAYS) trigger off for the session."""
    script = f"SET session_replication_role = replica;\n{RECIPE}\n{sql}"
    result = subprocess.run(
        [psql_program(), database_url(), "-X", "-q", "-v", "ON_ERROR_STOP=1"],
        input=script,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def verify_audit(*args: str) -> subprocess.CompletedProcess:
    """``manage.py verify_audit`` as an operator runs it: its own process, the web processes' key."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "SECRET_KEY": "insecure-test-only-key",
        "OPSCONSOLE_AUDIT_KEY": settings.OPSCONSOLE_AUDIT_KEY,
        "OPSCONSOLE_AUDIT_KEY_ID": settings.OPSCONSOLE_AUDIT_KEY_ID,
        "OPSCONSOLE_AUDIT_HEADS_TO": settings.OPSCONSOLE_AUDIT_HEADS_TO,
        "DEBUG": "1",
    }
    return subprocess.run(
        [sys.executable, "manage.py", "verify_audit", *args],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_broken(pattern: str) -> None:
    result = verify_audit()
    assert result.returncode != 0, f"verify_audit passed:\n{result.stdout}"
    assert re.search(pattern, result.stderr), result.stderr


@pytest.fixture
def exported(workspace, tmp_path, settings):
    """A day's history in two workspaces and the global chain, its heads exported, as the schedule does."""
    settings.OPSCONSOLE_AUDIT_HEADS_TO = f"file://{tmp_path / 'heads.jsonl'}"
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    for n in range(4):
        submit_brief(workspace, request_id=f"R-{n}")
    submit_brief(other)
    process_due_operations(worker="w1")
    pause.set_paused(paused=True, actor="alice", reason="deploy")
    call_command("export_audit_heads", stdout=StringIO())
    result = verify_audit()
    assert result.returncode == 0, result.stderr
    assert "Audit trail intact" in result.stdout, result.stderr
    return workspace, other


def chain(workspace) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(workspace=workspace).order_by("id"))


def test_an_edited_event_is_named(exported):
    workspace, _ = exported
    target = chain(workspace)[3]
    as_owner(f"UPDATE ledger_auditevent SET message = 'nothing to see' WHERE id = {target.pk}")
    assert_broken(f"event {target.pk} .*was changed after it was written")


def test_a_deleted_event_is_named(exported):
    workspace, _ = exported
    target = chain(workspace)[3]
    as_owner(f"DELETE FROM ledger_auditevent WHERE id = {target.pk}")
    assert_broken(f"event {chain(workspace)[3].pk} .*does not follow the event before it")


def test_a_cut_off_tail_is_found(exported):
    workspace, _ = exported
    tail = chain(workspace)[-2:]
    as_owner(f"DELETE FROM ledger_auditevent WHERE id IN ({tail[0].pk}, {tail[1].pk})")
    assert_broken(f"head of workspace demo, event {tail[1].pk}, is no longer on its chain")


def test_a_truncated_trail_is_found(exported):
    as_owner("TRUNCATE ledger_auditevent")
    assert_broken("is no longer on its chain")


def test_one_workspace_deleted_whole_is_found(exported):
    _, other = exported
    as_owner(f"DELETE FROM ledger_auditevent WHERE workspace_id = {other.pk}")
    assert_broken("head of workspace other, event \\d+, is no longer on its chain")


def test_a_chain_edited_then_re_hashed_without_a_key_is_found(exported):
    """Edit one event, delete another, then re-hash the whole chain as the unkeyed SHA-256 of before
    keys: it links up, and passed before the chain was keyed and held to its heads."""
    workspace, _ = exported
    events = chain(workspace)
    as_owner(
        f"""
        UPDATE ledger_auditevent SET message = 'nothing to see' WHERE id = {events[2].pk};
        DELETE FROM ledger_auditevent WHERE id = {events[4].pk};
        DO $$ DECLARE e ledger_auditevent; previous text := ''; BEGIN
            FOR e IN SELECT * FROM ledger_auditevent WHERE workspace_id = {workspace.pk} ORDER BY id LOOP
                UPDATE ledger_auditevent SET prev_hash = previous, hash = pg_temp.hashed(e, previous), hash_key = ''
                WHERE id = e.id RETURNING hash INTO previous;
            END LOOP;
        END $$;
        """
    )
    assert_broken("head of workspace demo, event \\d+, is no longer on its chain")
    # And without the heads, the keying date alone finds it (--no-heads says what it cannot see).
    result = verify_audit("--no-heads")
    assert result.returncode != 0
    assert re.search(f"event {events[0].pk} .*hashed without a key, and this installation was keyed", result.stderr)


def test_a_chain_made_up_since_the_heads_is_found(exported):
    """A new workspace and an unkeyed chain for it, backdated before keys (so no keying date can
    tell): it appeared since the last heads without a keyed first event."""
    as_owner(
        """
        INSERT INTO ledger_workspace (slug, approved_owners, retry_budget_per_hour, created_at)
        VALUES ('forged', '[]', 100, '2020-01-01');
        DO $$ DECLARE e ledger_auditevent; previous text := ''; BEGIN
            INSERT INTO ledger_auditevent (workspace_id, actor, kind, from_state, to_state, error_category, message,
                                           created_at, prev_hash, hash, hash_key)
            SELECT w.id, 'alice', 'token_issued', '', '', '', 'forged ' || n,
                   '2020-01-01'::timestamptz + n * interval '1 s', '', '', ''
            FROM ledger_workspace w, generate_series(1, 3) n WHERE w.slug = 'forged';
            FOR e IN SELECT a.* FROM ledger_auditevent a JOIN ledger_workspace w ON w.id = a.workspace_id
                     WHERE w.slug = 'forged' ORDER BY a.id LOOP
                UPDATE ledger_auditevent SET prev_hash = previous, hash = pg_temp.hashed(e, previous)
                WHERE id = e.id RETURNING hash INTO previous;
            END LOOP;
        END $$;
        """
    )
    assert_broken("begins a chain that appeared since the heads exported .* and is not keyed")


def test_the_serving_role_cannot_append_an_unkeyed_event(exported, serving_role):  # noqa: F811
    """The serving role (owns nothing, triggers on) tries to append the unkeyed form: refused."""
    workspace, _ = exported
    url, _ = serving_role
    head = chain(workspace)[-1]
    result = psql(
        url,
        f"""
        INSERT INTO ledger_auditevent (workspace_id, actor, kind, from_state, to_state, error_category, message,
                                       created_at, prev_hash, hash, hash_key)
        VALUES ({workspace.pk}, 'alice', 'note', '', '', '', 'forged', now(), '{head.hash}', repeat('0', 64), '')
        """,
    )
    assert result.returncode != 0, result.stderr
    assert "has no MAC under an audit key" in result.stderr, result.stderr
    assert verify_audit().returncode == 0


def test_the_serving_role_cannot_hide_an_event_below_the_ids_handed_out(exported, serving_role):  # noqa: F811
    """An id is the writer's to choose: an event at id -1, with a made-up MAC, in a chain and in a
    workspace of its own. Verification reads every chain from its least id."""
    workspace, _ = exported
    url, _ = serving_role
    columns = (
        "id, workspace_id, actor, kind, from_state, to_state, error_category, message, created_at, prev_hash, hash"
    )
    result = psql(
        url,
        f"INSERT INTO ledger_auditevent ({columns}, hash_key) VALUES "
        f"(-1, {workspace.pk}, 'alice', 'approved', '', '', '', 'forged', now(), '', repeat('d', 64), "
        f"'{settings.OPSCONSOLE_AUDIT_KEY_ID}')",
    )
    assert result.returncode == 0, result.stderr  # the trigger sees a MAC: only the key can tell it is none
    assert_broken("event -1 .*was changed after it was written")


def test_unhashed_events_slipped_in_as_of_before_chaining_are_found(exported, settings):
    """Events with no hash at all pass for events of before the chain at the start of one: a made-up
    workspace whose chain is two such events, the first naming a key id (so it looks keyed)."""
    as_owner(
        f"""
        INSERT INTO ledger_workspace (slug, approved_owners, retry_budget_per_hour, created_at)
        VALUES ('ghost', '[]', 100, '2020-01-01');
        INSERT INTO ledger_auditevent (workspace_id, actor, kind, from_state, to_state, error_category, message,
                                       created_at, prev_hash, hash, hash_key)
        SELECT w.id, 'alice', kind, '', '', '', 'forged', '2020-01-01', '', '', key_id
        FROM ledger_workspace w, (VALUES ('note', '{settings.OPSCONSOLE_AUDIT_KEY_ID}'), ('approved', ''))
             AS e(kind, key_id)
        WHERE w.slug = 'ghost';
        """
    )
    assert_broken("has no MAC under an audit key, and every event after event 0 was written with one")


def test_a_never_keyed_chain_grown_with_backdated_unkeyed_events_is_found(exported):
    """A chain all of whose events are of before keys (a quiet workspace, upgraded): the owner adds
    an unkeyed event dated before keys after its exported head. Its id gives it away."""
    workspace, _ = exported
    as_owner(
        f"""
        DO $$ DECLARE e ledger_auditevent; previous text := ''; BEGIN
            FOR e IN SELECT * FROM ledger_auditevent WHERE workspace_id = {workspace.pk} ORDER BY id LOOP
                UPDATE ledger_auditevent SET prev_hash = previous, hash = pg_temp.hashed(e, previous), hash_key = '',
                       created_at = '2020-01-01'
                WHERE id = e.id RETURNING hash INTO previous;
            END LOOP;
        END $$;
        """
    )
    result = verify_audit("--no-heads")  # the keying date cannot tell: every event says 2020
    assert result.returncode != 0
    assert "has no MAC under an audit key, and every event after event 0 was written with one" in result.stderr


def test_a_retired_key_cannot_add_events_after_the_rotation(exported, settings):
    """A retired key leaked: events signed with it after events under the key that replaced it."""
    workspace, _ = exported
    retired_id, retired = settings.OPSCONSOLE_AUDIT_KEY_ID, settings.OPSCONSOLE_AUDIT_KEY
    settings.OPSCONSOLE_AUDIT_OLD_KEYS = {retired_id: retired}
    settings.OPSCONSOLE_AUDIT_KEY_ID, settings.OPSCONSOLE_AUDIT_KEY = "next", "the-key-after-rotation-0123456789"
    transitions.record_audit_event(actor="alice", kind="note", workspace=workspace, message="after the rotation")
    settings.OPSCONSOLE_AUDIT_KEY_ID, settings.OPSCONSOLE_AUDIT_KEY = retired_id, retired  # the leaked key writes
    forged = transitions.record_audit_event(actor="alice", kind="approved", workspace=workspace, message="forged")
    settings.OPSCONSOLE_AUDIT_KEY_ID, settings.OPSCONSOLE_AUDIT_KEY = "next", "the-key-after-rotation-0123456789"

    out = StringIO()
    with pytest.raises(CommandError, match=f"event {forged.pk} .*retired before a key that events before it used"):
        call_command("verify_audit", stdout=out)


def test_a_moved_keying_date_is_found(exported):
    """The owner moves the installation's keying date later, to pass off unkeyed events: the signed
    heads carry the date it had."""
    as_owner("UPDATE ledger_auditinstallation SET keyed_since = now() + interval '1 day'")
    assert_broken("the installation was keyed on .* and the database now says")


def test_heads_of_another_installation_are_refused(exported):
    replaced = f"INSERT INTO ledger_auditinstallation VALUES (1, '{uuid.uuid4()}', now(), 0)"
    as_owner(f"DELETE FROM ledger_auditinstallation; {replaced}")
    assert_broken("it is of installation .*, and this database is")


def test_verification_refuses_to_run_without_heads_unless_told(workspace, settings):
    settings.OPSCONSOLE_AUDIT_HEADS_TO = ""
    result = verify_audit()
    assert result.returncode != 0
    assert "No exported heads to hold the database to" in result.stderr

    result = verify_audit("--no-heads")
    assert result.returncode == 0
    assert "Audit trail intact" in result.stdout
    assert "NOT checked: events cut off the end of a chain" in result.stderr


# What a fixed transformation of the key gives: whoever reads one of these has the key.
def derived(key: str) -> dict[str, str]:
    block = key.encode()
    padded = (hashlib.sha256(block).digest() if len(block) > 64 else block).ljust(64, b"\0")
    return {
        "key": key,
        "key hex": block.hex(),
        "key base64": base64.b64encode(block).decode(),
        "key sha256": hashlib.sha256(block).hexdigest(),
        "HMAC inner pad": bytes(b ^ 0x36 for b in padded).hex(),
        "HMAC outer pad": bytes(b ^ 0x5C for b in padded).hex(),
    }


def server_log() -> Path:
    """The log file of the embedded PostgreSQL the suite runs on (opsconsole/embedded_db.py)."""
    from opsconsole import embedded_db

    marker = f"log-marker-{uuid.uuid4()}"
    with connection.cursor() as cursor:
        cursor.execute("SET log_statement = 'all'")
        cursor.execute("SELECT %s", [marker])
    if not embedded_db.LOG.exists() or marker not in embedded_db.LOG.read_text(errors="replace"):
        pytest.skip(f"the server's log is not readable here (not the embedded PostgreSQL at {embedded_db.LOG})")
    return embedded_db.LOG


def test_the_statement_log_of_a_day_holds_nothing_of_the_key(workspace, tmp_path, settings):
    settings.OPSCONSOLE_AUDIT_OLD_KEYS = {settings.OPSCONSOLE_AUDIT_KEY_ID: settings.OPSCONSOLE_AUDIT_KEY}
    settings.OPSCONSOLE_AUDIT_KEY_ID, settings.OPSCONSOLE_AUDIT_KEY = "day", "a-key-to-look-for-" + uuid.uuid4().hex
    settings.OPSCONSOLE_AUDIT_HEADS_TO = f"file://{tmp_path / 'heads.jsonl'}"
    log = server_log()
    start = log.stat().st_size
    with connection.cursor() as cursor:
        cursor.execute("SET log_parameter_max_length = -1")
    # A day: single events, a batch, a duplicate, the drain, people's changes, the global chain.
    for n in range(3):
        submit_brief(workspace, request_id=f"R-{n}")
    brief = {"action": "prepare-brief", "data": {"title": "t", "owner": "ops", "version": 1}}
    batch = [brief | {"data": brief["data"] | {"request_id": f"B-{n}"}} for n in range(5)]
    submit_batch(workspace=workspace, raw_events=batch + batch[:1], source="api", submitted_by="token:t")
    process_due_operations(worker="w1")
    transitions.record_audit_event(actor="alice", kind="note", workspace=workspace, message="a note")
    pause.set_paused(paused=True, actor="alice", reason="deploy")
    call_command("export_audit_heads", stdout=StringIO())
    call_command("verify_audit", stdout=StringIO())
    with connection.cursor() as cursor:
        cursor.execute("SET log_statement = 'none'")

    logged = log.read_bytes()[start:].decode(errors="replace")
    assert "ledger_reserve" in logged
    assert "ledger_auditevent" in logged  # the log saw the day
    found = {name: value for name, value in derived(settings.OPSCONSOLE_AUDIT_KEY).items() if value in logged}
    assert found == {}
