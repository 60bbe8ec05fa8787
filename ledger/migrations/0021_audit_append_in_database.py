"""Appending audit events on PostgreSQL in one statement (for the drain).

``ledger.audit.append`` built a model instance per event and inserted them with ``bulk_create``
after a round trip for the chain's head: for a claimed batch of 50 operations, two appends of 50
to 100 events each cost more Python than the rest of the batch. ``ledger_audit_append`` takes the
rows as JSON (every column, as ``ledger.rows.model_row`` writes them), locks the chain, reads its
head, hashes the events along it with ``ledger_audit_hash`` (0009: the same hash as Python's
``ledger.audit.event_hash``) and inserts them; it returns each event's id, previous hash and hash, in order.
"""

from django.db import migrations

AUDIT_APPEND = """
CREATE OR REPLACE FUNCTION ledger_audit_append(lock_key bigint, chain bigint, events jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    audit_ids regclass := pg_get_serial_sequence('ledger_auditevent', 'id')::regclass;
    audits jsonb[];
    previous text;
    place int;
BEGIN
    -- Locked until the commit, then read in a statement of its own, so the head is what the lock's
    -- previous holder committed (as ledger_audit_locked_head, 0008).
    PERFORM pg_advisory_xact_lock(lock_key);
    IF chain IS NULL THEN
        SELECT hash INTO previous FROM ledger_auditevent WHERE workspace_id IS NULL AND hash <> ''
        ORDER BY id DESC LIMIT 1;
    ELSE
        SELECT hash INTO previous FROM ledger_auditevent WHERE workspace_id = chain AND hash <> ''
        ORDER BY id DESC LIMIT 1;
    END IF;
    previous := coalesce(previous, '');
    SELECT array_agg(event ORDER BY place_in) INTO audits
    FROM jsonb_array_elements(events) WITH ORDINALITY AS given(event, place_in);
    FOR place IN 1 .. coalesce(array_length(audits, 1), 0) LOOP
        audits[place] := audits[place] || jsonb_build_object('id', nextval(audit_ids), 'prev_hash', previous);
        previous := ledger_audit_hash(audits[place]);
        audits[place] := audits[place] || jsonb_build_object('hash', previous);
    END LOOP;
    INSERT INTO ledger_auditevent
    SELECT r.* FROM unnest(audits) AS rows(row), LATERAL jsonb_populate_record(NULL::ledger_auditevent, row) r;
    RETURN (SELECT coalesce(jsonb_agg(jsonb_build_array(row->'id', row->'prev_hash', row->'hash') ORDER BY n), '[]'::jsonb)
            FROM unnest(audits) WITH ORDINALITY AS written(row, n));
END
$$;
"""


def create_function(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(AUDIT_APPEND, params=None)


def drop_function(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS ledger_audit_append(bigint, bigint, jsonb)", params=None)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0020_queue_sort_indexes")]

    operations = [migrations.RunPython(create_function, drop_function, elidable=False)]
