"""The audit trail is a hash chain per workspace: an event changed, removed or slipped in, even by
someone who can disable the append-only trigger, is found by ``verify_audit`` at the first broken
link."""

import re
import threading
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from ledger import audit, services
from ledger.models import AuditEvent
from ledger.processing import process_due_operations
from tests.ledger.conftest import submit_brief


@pytest.fixture
def history(workspace):
    """Some real history in two workspaces and the global chain."""
    other, _ = services.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    for n in range(3):
        submit_brief(workspace, request_id=f"R-{n}")
    submit_brief(other)
    process_due_operations(worker="w1")
    services.set_paused(paused=True, actor="alice", reason="deploy")
    return workspace, other


def verify() -> str:
    out = StringIO()
    call_command("verify_audit", stdout=out)
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
        assert events and events[0].prev_hash == ""
        assert [e.prev_hash for e in events[1:]] == [e.hash for e in events[:-1]]
        assert all(audit.event_hash(e) == e.hash for e in events)


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

    with pytest.raises(CommandError, match=f"Audit chain broken: event {target.pk} \\(claimed, .*\\) "
                                           "was changed after it was written."):
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
            services.record_audit_event(actor=f"writer-{n}", kind="note", workspace=workspace)
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert verify().splitlines()[-1].startswith("Audit trail intact:")
    assert AuditEvent.objects.filter(workspace=workspace, kind="note").count() == 16


@pytest.mark.parametrize("message", [
    "", "plain", "Ünïcödé and ✓ and 𝄞", "line\nbreak\ttab \"quoted\" \\ backslash", "12:34:colons",
    "x" * 500,
])
def test_the_database_hashes_an_event_as_python_does(workspace, message):
    """Intake on PostgreSQL chains its events in SQL (ledger_audit_hash); verify_audit recomputes
    them in Python: the two encodings agree byte for byte, for any text and any time. Here under the
    first scheme (no key: the events of before migration 0030); tests/ledger/test_audit_keyed.py
    holds them to the same under a key."""
    import json
    from datetime import UTC, datetime

    event = AuditEvent(workspace_id=workspace.pk, operation_id=None, attempt_id=7, actor="alice@example",
                       kind="reserved", from_state="", to_state="pending", error_category="", message=message,
                       created_at=datetime(2026, 12, 1, 9, 5, 55, 239842, tzinfo=UTC), prev_hash="ab" * 32,
                       hash_key="")
    row = {"workspace_id": event.workspace_id, "operation_id": None, "attempt_id": 7, "actor": event.actor,
           "kind": event.kind, "from_state": "", "to_state": "pending", "error_category": "", "message": message,
           "created_at": event.created_at.isoformat(), "prev_hash": event.prev_hash}
    with connection.cursor() as cursor:
        cursor.execute("SELECT ledger_audit_hash(%s::jsonb)", [json.dumps(row)])
        assert cursor.fetchone()[0] == audit.event_hash(event)
        cursor.execute("SELECT ledger_audit_hash(%s::jsonb)", [json.dumps({**row, "message": message + "."})])
        assert cursor.fetchone()[0] != audit.event_hash(event)
