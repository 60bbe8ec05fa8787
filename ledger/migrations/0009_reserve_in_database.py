import django.db.models.deletion
from django.db import migrations, models

# ledger.audit.event_hash, in SQL: the SHA-256 of the event's fields, each written as its length in
# UTF-8 bytes, a colon and the text (ids as numbers, "" when none; the time as microseconds since
# 1970), so that no two events share an encoding. The two must agree byte for byte
# (tests/ledger/test_audit_chain.py holds them to it).
AUDIT_HASH = """
CREATE OR REPLACE FUNCTION ledger_audit_hash(event jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
SELECT encode(sha256(convert_to(string_agg(octet_length(field)::text || ':' || field, '' ORDER BY place), 'UTF8')), 'hex')
FROM unnest(ARRAY[
    coalesce(event->>'prev_hash', ''), coalesce(event->>'workspace_id', ''), coalesce(event->>'operation_id', ''),
    coalesce(event->>'attempt_id', ''), event->>'actor', event->>'kind', event->>'from_state', event->>'to_state',
    event->>'error_category', event->>'message',
    (extract(epoch FROM (event->>'created_at')::timestamptz) * 1000000)::bigint::text
]) WITH ORDINALITY AS fields(field, place)
$$;
"""

# ledger.reservation on PostgreSQL: everything intake writes for the events of one request, in one
# statement (so in autocommit one round trip and one commit). ``request`` carries rows Python built
# from the models (every column but the ids and what only the database can decide), so columns
# added later reach the tables without a change here:
#   workspace_id, source, now, chain_lock (the audit chain's advisory lock key), invalid: [delivery
#   row], conflict, contribution (or null), audit: the rows those get, events: [{operation: row,
#   delivery: row, fingerprint_fields: [name]}].
# Returns {"wake": whether this request took the pending wake-up (the caller enqueues a task after
# commit), "results": [{outcome, operation: row, conflict: row | null}] in the order of events}.
RESERVE = """
CREATE OR REPLACE FUNCTION ledger_operations_of(workspace bigint, keys text[]) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    wanted text;
    row jsonb;
    found_keys text[] := '{}';
    found_rows jsonb[] := '{}';
BEGIN
    FOREACH wanted IN ARRAY keys LOOP
        SELECT to_jsonb(o) INTO row FROM ledger_operation o WHERE o.workspace_id = workspace AND o.key = wanted;
        IF row IS NOT NULL THEN
            found_keys := array_append(found_keys, wanted);
            found_rows := array_append(found_rows, row);
        END IF;
    END LOOP;
    RETURN (SELECT coalesce(jsonb_object_agg(k, r), '{}') FROM unnest(found_keys, found_rows) AS pairs(k, r));
END
$$;

CREATE OR REPLACE FUNCTION ledger_reserve(request jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    workspace bigint := (request->>'workspace_id')::bigint;
    source text := request->>'source';
    operation_ids regclass := pg_get_serial_sequence('ledger_operation', 'id')::regclass;
    delivery_ids regclass := pg_get_serial_sequence('ledger_delivery', 'id')::regclass;
    conflict_ids regclass := pg_get_serial_sequence('ledger_conflict', 'id')::regclass;
    audit_ids regclass := pg_get_serial_sequence('ledger_auditevent', 'id')::regclass;
    contribution_ids regclass := pg_get_serial_sequence('ledger_contribution', 'id')::regclass;
    created bigint[] := '{}';
    keys text[];
    taken text[];
    operations jsonb;
    reserved bigint[] := '{}';
    event jsonb;
    operation jsonb;
    outcome text;
    delivery_id bigint;
    conflict jsonb;
    differences jsonb;
    message text;
    deliveries jsonb[] := '{}';
    conflicts jsonb[] := '{}';
    contributions jsonb[] := '{}';
    audits jsonb[] := '{}';
    results jsonb[] := '{}';
    previous text;
    accepted int := 0;
    wake boolean := false;
BEGIN
    INSERT INTO ledger_delivery
    SELECT r.* FROM jsonb_array_elements(request->'invalid') AS rows(row),
    LATERAL jsonb_populate_record(NULL::ledger_delivery, row || jsonb_build_object('id', nextval(delivery_ids))) r;

    IF jsonb_array_length(request->'events') = 0 THEN
        RETURN jsonb_build_object('wake', false, 'results', '[]'::jsonb);
    END IF;

    SELECT array_agg(DISTINCT item->'operation'->>'key') INTO keys
    FROM jsonb_array_elements(request->'events') AS items(item);

    -- The keys taken before this request (duplicates and conflicts reserve nothing). One lookup
    -- per key: equality on both columns of operation_unique_key is the plan whatever the table's
    -- statistics say (with key = ANY(..), stale ones made the key a filter over the workspace).
    operations := ledger_operations_of(workspace, keys);

    -- The database decides who reserves each new key (DESIGN.md rule 2): the rows the INSERT
    -- returns are the ones this request created; a key repeated in the request is reserved by its
    -- first event.
    IF (SELECT count(*) FROM jsonb_object_keys(operations)) < array_length(keys, 1) THEN
        WITH events AS (
            SELECT DISTINCT ON (item->'operation'->>'key') item, place
            FROM jsonb_array_elements(request->'events') WITH ORDINALITY AS items(item, place)
            WHERE NOT operations ? (item->'operation'->>'key')
            ORDER BY item->'operation'->>'key', place
        ), inserted AS (
            INSERT INTO ledger_operation
            SELECT r.* FROM events,
            LATERAL jsonb_populate_record(NULL::ledger_operation,
                                          item->'operation' || jsonb_build_object('id', nextval(operation_ids))) r
            ORDER BY place
            ON CONFLICT ON CONSTRAINT operation_unique_key DO NOTHING
            RETURNING ledger_operation.*
        )
        SELECT coalesce(array_agg(o.id), '{}'), operations || coalesce(jsonb_object_agg(o.key, to_jsonb(o)), '{}')
        INTO created, operations FROM inserted o;

        -- Keys another transaction reserved between the two statements above (the INSERT waited
        -- for it to commit): read in a statement of their own, which sees that commit.
        SELECT array_agg(key) INTO taken FROM unnest(keys) AS keys(key) WHERE NOT operations ? key;
        IF taken IS NOT NULL THEN
            operations := operations || ledger_operations_of(workspace, taken);
        END IF;
    END IF;

    FOR event IN SELECT item FROM jsonb_array_elements(request->'events') WITH ORDINALITY AS items(item, place)
                 ORDER BY place LOOP
        operation := operations->(event->'operation'->>'key');
        delivery_id := nextval(delivery_ids);
        conflict := NULL;
        IF (operation->>'id')::bigint = ANY(created) AND NOT (operation->>'id')::bigint = ANY(reserved) THEN
            outcome := 'accepted';
            reserved := array_append(reserved, (operation->>'id')::bigint);
            accepted := accepted + 1;
            message := 'delivery ' || delivery_id || ' via ' || source;
            IF request->'contribution' <> 'null' THEN
                contributions := array_append(contributions,
                    request->'contribution' || jsonb_build_object('operation_id', operation->'id'));
            END IF;
        ELSIF operation->>'fingerprint' = event->'operation'->>'fingerprint' THEN
            outcome := 'duplicate';
            message := 'delivery ' || delivery_id || ' via ' || source;
        ELSE
            outcome := 'conflict';
            SELECT coalesce(jsonb_agg(jsonb_build_object(
                       'field', name, 'recorded', coalesce(operation->'payload'->name, 'null'),
                       'incoming', coalesce(event->'operation'->'payload'->name, 'null')) ORDER BY place), '[]')
            INTO differences
            FROM jsonb_array_elements_text(event->'fingerprint_fields') WITH ORDINALITY AS names(name, place)
            WHERE (operation->'payload'->name) IS DISTINCT FROM (event->'operation'->'payload'->name);
            conflict := request->'conflict' || jsonb_build_object(
                'id', nextval(conflict_ids), 'operation_id', operation->'id', 'delivery_id', delivery_id,
                'incoming_fingerprint', event->'operation'->'fingerprint',
                'incoming_payload', event->'operation'->'payload', 'differences', differences);
            conflicts := array_append(conflicts, conflict);
            message := 'conflict ' || (conflict->>'id') || ': '
                || coalesce((SELECT string_agg(d->>'field', ', ') FROM jsonb_array_elements(differences) AS ds(d)), '')
                || ' differ';
        END IF;
        deliveries := array_append(deliveries, event->'delivery' || jsonb_build_object(
            'id', delivery_id, 'operation_id', operation->'id', 'outcome', outcome));
        audits := array_append(audits, request->'audit' || jsonb_build_object(
            'operation_id', operation->'id',
            'kind', CASE outcome WHEN 'accepted' THEN 'reserved' WHEN 'duplicate' THEN 'duplicate_delivery'
                                 ELSE 'conflict_detected' END,
            'to_state', CASE WHEN outcome = 'accepted' THEN operation->>'state' ELSE '' END,
            'message', left(message, 500)));
        results := array_append(results, jsonb_build_object('outcome', outcome, 'operation', operation,
                                                            'conflict', conflict));
    END LOOP;

    INSERT INTO ledger_delivery
    SELECT r.* FROM unnest(deliveries) AS rows(row), LATERAL jsonb_populate_record(NULL::ledger_delivery, row) r;
    INSERT INTO ledger_conflict
    SELECT r.* FROM unnest(conflicts) AS rows(row), LATERAL jsonb_populate_record(NULL::ledger_conflict, row) r;
    INSERT INTO ledger_contribution
    SELECT r.* FROM unnest(contributions) AS rows(row),
    LATERAL jsonb_populate_record(NULL::ledger_contribution, row || jsonb_build_object('id', nextval(contribution_ids))) r;

    -- The audit chain last, as ledger.audit.append does: locked until the commit, then read (a
    -- statement of its own, after the lock: it sees what the lock's previous holder committed).
    PERFORM pg_advisory_xact_lock((request->>'chain_lock')::bigint);
    SELECT hash INTO previous FROM ledger_auditevent
    WHERE workspace_id = workspace AND hash <> '' ORDER BY id DESC LIMIT 1;
    previous := coalesce(previous, '');
    FOR place IN 1 .. coalesce(array_length(audits, 1), 0) LOOP
        audits[place] := audits[place] || jsonb_build_object('id', nextval(audit_ids), 'prev_hash', previous);
        previous := ledger_audit_hash(audits[place]);
        audits[place] := audits[place] || jsonb_build_object('hash', previous);
    END LOOP;
    INSERT INTO ledger_auditevent
    SELECT r.* FROM unnest(audits) AS rows(row), LATERAL jsonb_populate_record(NULL::ledger_auditevent, row) r;

    -- The wake-up (ledger.nudges.request_processing): a pending one is kept, KEY SHARE-locked until
    -- this commits (the task that takes it waits, then claims what this wrote); else this one is it.
    IF accepted > 0 THEN
        PERFORM 1 FROM ledger_wakeup WHERE name = 'process' FOR KEY SHARE;
        IF NOT FOUND THEN
            INSERT INTO ledger_wakeup (name, requested_at) VALUES ('process', (request->>'now')::timestamptz)
            ON CONFLICT DO NOTHING;
            wake := FOUND;
            IF NOT wake THEN
                PERFORM 1 FROM ledger_wakeup WHERE name = 'process' FOR KEY SHARE;
            END IF;
        END IF;
    END IF;

    RETURN jsonb_build_object('wake', wake, 'results', to_jsonb(results));
END
$$;
"""


# SQLite rebuilds a table to alter a column, and the rebuild drops its triggers: put the
# append-only trigger of 0002 back (PostgreSQL alters in place and keeps it).
SQLITE_TRIGGER = """
CREATE TRIGGER IF NOT EXISTS ledger_auditevent_append_only BEFORE UPDATE ON ledger_auditevent
BEGIN
    SELECT RAISE(ABORT, 'ledger_auditevent is append-only: UPDATE refused');
END;
"""


def restore_sqlite_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(SQLITE_TRIGGER, params=None)


def create_functions(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(AUDIT_HASH, params=None)
        schema_editor.execute(RESERVE, params=None)


def drop_functions(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS ledger_reserve(jsonb)", params=None)
        schema_editor.execute("DROP FUNCTION IF EXISTS ledger_operations_of(bigint, text[])", params=None)
        schema_editor.execute("DROP FUNCTION IF EXISTS ledger_audit_hash(jsonb)", params=None)


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0008_intake_fast_path'),
    ]

    operations = [
        # Indexes of their own that others already lead with (operation_unique_key, audit_chain_idx):
        # every insert paid for them, and the planner, on a table not analysed lately, picked the
        # workspace index over the unique one for intake's lookup by key.
        migrations.AlterField(
            model_name='auditevent',
            name='workspace',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='audit_events', to='ledger.workspace'),
        ),
        migrations.AlterField(
            model_name='operation',
            name='workspace',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='operations', to='ledger.workspace'),
        ),
        migrations.RunPython(restore_sqlite_trigger, migrations.RunPython.noop),
        migrations.RunPython(create_functions, drop_functions),
    ]
