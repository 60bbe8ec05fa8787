"""Events chained before the audit key (migration 0030) keep verifying under their own scheme, the
first one (unkeyed SHA-256), and the chain goes on keyed after them."""

import json
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from ledger.core import transitions
from ledger.models import AuditEvent, Workspace

# The database migrated back to 0029 and forward again.
pytestmark = pytest.mark.slow

BEFORE = [("ledger", "0029_finish_claimed_in_database")]
# The chain's advisory lock key of then: "AUDT" in the high 32 bits, the workspace id in the low ones.
V1_LOCK_NAMESPACE = 0x41554454 << 32


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


def leaves():
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def write_v1_chain(workspace_id: int, count: int) -> None:
    """Append ``count`` events as the code before the key did: by ledger_audit_append of then (rows
    without a key id, hashed with the unkeyed SHA-256)."""
    rows = [
        {
            "workspace_id": workspace_id,
            "operation_id": None,
            "attempt_id": None,
            "actor": f"old-{n}",
            "kind": "note",
            "from_state": "",
            "to_state": "",
            "error_category": "",
            "message": f"before keys {n}",
            "created_at": datetime(2026, 11, 1, 12, n, tzinfo=UTC).isoformat(),
            "prev_hash": "",
            "hash": "",
        }
        for n in range(count)
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ledger_audit_append(%s, %s, %s::jsonb)",
            [V1_LOCK_NAMESPACE | workspace_id, workspace_id, json.dumps(rows)],
        )


@pytest.mark.django_db(transaction=True)
def test_events_chained_before_the_key_still_verify_after_the_migration(settings):
    latest = leaves()
    migrate(BEFORE)
    try:
        # The workspace too, as the code of then would: no event of the new code precedes the old ones.
        then = MigrationExecutor(connection).loader.project_state(BEFORE).apps
        workspace = then.get_model("ledger", "Workspace").objects.create(slug="old")
        write_v1_chain(workspace.pk, 4)
    finally:
        migrate(latest)
    workspace = Workspace.objects.get(pk=workspace.pk)

    old = list(AuditEvent.objects.filter(workspace=workspace, kind="note").order_by("id"))
    assert len(old) == 4
    assert {event.hash_key for event in old} == {""}
    transitions.record_audit_event(actor="new", kind="note", workspace=workspace)
    newest = AuditEvent.objects.filter(workspace=workspace).order_by("-id").first()
    assert newest.hash_key == settings.OPSCONSOLE_AUDIT_KEY_ID
    assert newest.prev_hash == old[-1].hash

    out = StringIO()
    call_command("verify_audit", "--no-heads", stdout=out)
    assert out.getvalue().splitlines()[-1].startswith("Audit trail intact:")
