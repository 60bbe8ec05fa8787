"""The audit trail is a hash chain per workspace: an event changed, removed or slipped in, even by
someone who can disable the append-only trigger, is found by ``verify_audit`` at the first broken
link."""

import re
import threading
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from ledger.core import accounts, audit_mac, transitions
from ledger.engine.processing import process_due_operations
from ledger.models import AuditEvent
from ledger.people import pause
from tests.ledger.conftest import submit_brief


@pytest.fixture
def history(workspace):
    """Some real history in two workspaces and the global chain."""
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    for n in range(3):
        submit_brief(workspace, request_id=f"R-{n}")
    submit_brief(other)
    process_due_operations(worker="w1")
    pause.set_paused(paused=True, actor="alice", reason="deploy")
    return workspace, other


def verify() -> str:
    out = StringIO()
    call_command("verify_audit", "--no-heads", stdout=out)  # the chains alone (the heads: test_audit_trust.py)
    return out.getvalue()


def tamper(sql: str, params: list) -> None:
    """Change the table behind the trigger's back, as an owner of the database could."""
    with connection.cursor() as cursor:
        # What a superuser can do: run with every (non-ALWAYS) trigger off.
        cursor.execute("SET session_replication_role = replica")
        cursor.execute(sql, params)
        cursor.execute("SET session_replication_role = DEFAULT")


def test_it_links_each_event_to_the_one_before_in_its_workspace(history):
    workspace, other = history
    for workspace_id in (workspace.pk, other.pk, None):
        events = list(AuditEvent.objects.filter(workspace_id=workspace_id).order_by("id"))
        assert events
        assert events[0].prev_hash == ""
        assert [e.prev_hash for e in events[1:]] == [e.hash for e in events[:-1]]
        assert all(re.fullmatch("[0-9a-f]{64}", e.hash) for e in events)


def test_it_reports_an_intact_trail(history):
    output = verify()

    total = AuditEvent.objects.count()
    assert output.splitlines()[-1] == f"Audit trail intact: {total} events in 3 chain(s)."
    assert re.search(r"^workspace demo: \d+ events, head [0-9a-f]{64}$", output, re.M)
    assert re.search(r"^global: 1 events, head [0-9a-f]{64}$", output, re.M)


def test_it_finds_an_event_edited_with_the_trigger_disabled(history):
    workspace, _ = history
    target = AuditEvent.objects.filter(workspace=workspace, kind="claimed").order_by("id")[1]

    tamper("UPDATE ledger_auditevent SET actor = %s WHERE id = %s", ["someone-else", target.pk])

    with pytest.raises(
        CommandError, match=f"Audit chain broken: event {target.pk} \\(claimed, .*\\) was changed after it was written."
    ):
        verify()


def test_it_finds_an_event_removed(history):
    workspace, _ = history
    target = AuditEvent.objects.filter(workspace=workspace).order_by("id")[2]
    following = AuditEvent.objects.filter(workspace=workspace, id__gt=target.pk).order_by("id").first()

    tamper("DELETE FROM ledger_auditevent WHERE id = %s", [target.pk])

    with pytest.raises(CommandError, match=f"event {following.pk} .* does not follow the event before it"):
        verify()


def test_it_finds_a_hash_blanked_to_hide_an_edit(history):
    workspace, _ = history
    target = AuditEvent.objects.filter(workspace=workspace).order_by("id")[3]

    tamper("UPDATE ledger_auditevent SET hash = '', message = %s WHERE id = %s", ["nothing happened", target.pk])

    with pytest.raises(CommandError, match=f"event {target.pk} .* has no hash, after chained events"):
        verify()


@pytest.mark.django_db(transaction=True)
def test_it_keeps_one_chain_when_many_write_at_once(workspace):
    """Concurrent writers to one workspace take turns at its chain: it never forks."""
    barrier = threading.Barrier(16, timeout=30)

    def write(n):
        try:
            barrier.wait()
            transitions.record_audit_event(actor=f"writer-{n}", kind="note", workspace=workspace)
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert verify().splitlines()[-1].startswith("Audit trail intact:")
    assert AuditEvent.objects.filter(workspace=workspace, kind="note").count() == 16


@pytest.mark.parametrize(
    "message",
    [
        "",
        "plain",
        "Ünïcödé and ✓ and 𝄞",
        'line\nbreak\ttab "quoted" \\ backslash',
        "12:34:colons",
        "x" * 500,
    ],
)
def test_it_finds_an_edit_of_any_text(workspace, message):
    """An event of any text verifies as written, and one character more in it is found: the
    database hashes each field with its length, so no text can pass for another."""
    event = transitions.record_audit_event(actor="alice@example", kind="note", workspace=workspace, message=message)
    assert verify().splitlines()[-1].startswith("Audit trail intact:")

    tamper("UPDATE ledger_auditevent SET message = %s WHERE id = %s", [message[:499] + ".", event.pk])

    with pytest.raises(CommandError, match=f"event {event.pk} .* was changed after it was written"):
        verify()


def test_it_finds_text_moved_from_one_field_to_the_next(workspace):
    """The same characters, split otherwise between actor and kind, are another event."""
    event = transitions.record_audit_event(actor="alice", kind="note", workspace=workspace)

    tamper("UPDATE ledger_auditevent SET actor = 'alicen', kind = 'ote' WHERE id = %s", [event.pk])

    with pytest.raises(CommandError, match=f"event {event.pk} .* was changed after it was written"):
        verify()


# An event (the columns its MAC covers, and the time with its microseconds) and its hash under the
# first scheme (no key, SHA-256) and under a key (HMAC-SHA256), as the database computed them until
# migration 0045 (ledger_audit_hash). Chains already written hold these hashes: ledger.core.audit_mac
# must give the same for them.
WRITTEN = {
    "workspace_id": 3,
    "operation_id": None,
    "attempt_id": 7,
    "actor": "alice@example",
    "kind": "reserved",
    "from_state": "",
    "to_state": "pending",
    "error_category": "",
    "message": "Ünïcödé ✓ 𝄞 12:34\nline",
    "created_at": "2026-12-01T09:05:55.239842+00:00",
    "prev_hash": "ab" * 32,
}
UNKEYED_HASH = "2396b7fc1d1d46d313f36fb417da4e4c6846cdf70ef8555bed4cb7da78d50651"
KEYED_HASH = "d25537c4d42d2de3e99bf1f00f5978bd2bccddf98f1e5c7942403aaa9d13646a"  # under "clé-ünïcode-✓"


def test_an_event_of_before_keys_hashes_as_it_was_written():
    assert audit_mac.digest(WRITTEN, None) == UNKEYED_HASH


def test_a_keyed_event_hashes_as_it_was_written():
    assert audit_mac.digest(WRITTEN, "clé-ünïcode-✓") == KEYED_HASH
    assert audit_mac.digest(WRITTEN, "clé-ünïcode-✓.") != KEYED_HASH
