import django.db.models.deletion
from django.db import migrations, models

# ledger.audit.event_hash, in SQL: the SHA-256 of the event's fields, each written as its length in
# UTF-8 bytes, a colon and the text (ids as numbers, "" when none; the time as microseconds since
# 1970), so that no two events share an encoding. The two must agree byte for byte
# (tests/ledger/core/test_audit_chain.py holds them to it).
AUDIT_HASH = """
CREATE OR REPLACE FUNCTION ledger_audit_field(value text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT octet_length(coalesce(value, ''))::text || ':' || coalesce(value, '') $$;

-- Plain expressions (no query), so the planner inlines it where it is called.
CREATE OR REPLACE FUNCTION ledger_audit_hash(event jsonb) RETURNS text
LANGUAGE sql STABLE AS $$
SELECT encode(sha256(convert_to(
    ledger_audit_field(event->>'prev_hash') || ledger_audit_field(event->>'workspace_id')
    || ledger_audit_field(event->>'operation_id') || ledger_audit_field(event->>'attempt_id')
    || ledger_audit_field(event->>'actor') || ledger_audit_field(event->>'kind')
    || ledger_audit_field(event->>'from_state') || ledger_audit_field(event->>'to_state')
    || ledger_audit_field(event->>'error_category') || ledger_audit_field(event->>'message')
    || ledger_audit_field((extract(epoch FROM (event->>'created_at')::timestamptz) * 1000000)::bigint::text),
    'UTF8')), 'hex')
$$;
"""

# ledger.reservation on PostgreSQL: everything intake writes for the events of one request, in one
# statement (so in autocommit one round trip and one commit). ``request`` carries rows Python built
# from the models (every column but the ids and what only the database can decide), so columns
# added later reach the tables without a change here:
#   workspace_id, source, now, chain_lock (the audit chain's advisory lock key), invalid: [delivery
#   row]; operation, delivery, conflict, contribution (or null), audit: the rows those get, before
#   each event sets its own columns; fingerprint_fields: {action: [name]}; events: [{operation:
#   {the columns an event decides}, delivery: {delivery_id, occurred_at}}].
# Returns {"wake": whether this request took the pending wake-up (the caller enqueues a task after
# commit), "operations": {key: row}, "results": [{outcome, key, conflict: row | null}] in the order
# of events}.
RESERVE = """
CREATE OR REPLACE FUNCTION ledger_operations_of(workspace bigint, keys text[]) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    operations jsonb;
BEGIN
    -- One probe of operation_unique_key per key (OFFSET 0 keeps the subquery a parameterised
    -- lookup on both columns: joined plainly, stale statistics made the key a filter instead).
    -- PL/pgSQL rather than SQL, so that the plan is kept between calls.
    SELECT coalesce(jsonb_object_agg(existing.key, to_jsonb(existing)), '{}') INTO operations
    FROM unnest(keys) AS wanted(key),
    LATERAL (SELECT * FROM ledger_operation o WHERE o.workspace_id = workspace AND o.key = wanted.key OFFSET 0) existing;
    RETURN operations;
END
$$;

CREATE OR REPLACE FUNCTION ledger_reserve(request jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    workspace bigint := (request->>'workspace_id')::bigint;
    operation_ids regclass := pg_get_serial_sequence('ledger_operation', 'id')::regclass;
    delivery_ids regclass := pg_get_serial_sequence('ledger_delivery', 'id')::regclass;
    conflict_ids regclass := pg_get_serial_sequence('ledger_conflict', 'id')::regclass;
    audit_ids regclass := pg_get_serial_sequence('ledger_auditevent', 'id')::regclass;
    contribution_ids regclass := pg_get_serial_sequence('ledger_contribution', 'id')::regclass;
    keys text[];
    operations jsonb;
    created bigint[] := '{}';
    taken text[];
    audits jsonb[];
    results jsonb;
    accepted int;
    previous text;
    wake boolean := false;
BEGIN
    INSERT INTO ledger_delivery
    SELECT r.* FROM jsonb_array_elements(request->'invalid') AS rows(row),
    LATERAL jsonb_populate_record(NULL::ledger_delivery, row || jsonb_build_object('id', nextval(delivery_ids))) r;

    SELECT array_agg(DISTINCT item->'operation'->>'key') INTO keys
    FROM jsonb_array_elements(request->'events') AS items(item);
    IF keys IS NULL THEN
        RETURN jsonb_build_object('wake', false, 'operations', '{}'::jsonb, 'results', '[]'::jsonb);
    END IF;

    -- The keys taken before this request: duplicates and conflicts reserve nothing.
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
            LATERAL jsonb_populate_record(NULL::ledger_operation, request->'operation' || (item->'operation')
                                          || jsonb_build_object('id', nextval(operation_ids))) r
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

    -- Each event's outcome, and the rows it writes: its delivery (final from the start: nothing
    -- is updated later), its conflict, the person behind a new operation; then its audit event.
    WITH events AS (
        SELECT place, item->'operation' AS incoming, operations->(item->'operation'->>'key') AS operation,
               item->'delivery' AS delivery, nextval(delivery_ids) AS delivery_id,
               row_number() OVER (PARTITION BY item->'operation'->>'key' ORDER BY place) AS nth
        FROM jsonb_array_elements(request->'events') WITH ORDINALITY AS items(item, place)
    ), decided AS (
        SELECT *, CASE WHEN nth = 1 AND (operation->>'id')::bigint = ANY(created) THEN 'accepted'
                       WHEN operation->>'fingerprint' = incoming->>'fingerprint' THEN 'duplicate'
                       ELSE 'conflict' END AS outcome
        FROM events
    ), conflicts AS (
        SELECT place, request->'conflict' || jsonb_build_object(
                   'id', nextval(conflict_ids), 'operation_id', operation->'id', 'delivery_id', delivery_id,
                   'incoming_fingerprint', incoming->'fingerprint', 'incoming_payload', incoming->'payload',
                   'differences', differences) AS conflict,
               (SELECT string_agg(d->>'field', ', ') FROM jsonb_array_elements(differences) AS ds(d)) AS fields
        FROM decided,
        LATERAL (
            SELECT coalesce(jsonb_agg(jsonb_build_object(
                       'field', name, 'recorded', coalesce(operation->'payload'->name, 'null'),
                       'incoming', coalesce(incoming->'payload'->name, 'null')) ORDER BY n), '[]') AS differences
            FROM jsonb_array_elements_text(request->'fingerprint_fields'->(incoming->>'action'))
                 WITH ORDINALITY AS names(name, n)
            WHERE (operation->'payload'->name) IS DISTINCT FROM (incoming->'payload'->name)
        ) found
        WHERE outcome = 'conflict'
    ), written_deliveries AS (
        INSERT INTO ledger_delivery
        SELECT r.* FROM decided, LATERAL jsonb_populate_record(NULL::ledger_delivery,
            request->'delivery' || delivery || jsonb_build_object(
                'action', incoming->'action', 'key', incoming->'key', 'correlation_id', incoming->'correlation_id',
                'id', delivery_id, 'operation_id', operation->'id', 'outcome', outcome)) r
    ), written_conflicts AS (
        INSERT INTO ledger_conflict
        SELECT r.* FROM conflicts, LATERAL jsonb_populate_record(NULL::ledger_conflict, conflict) r
    ), written_contributions AS (
        INSERT INTO ledger_contribution
        SELECT r.* FROM decided, LATERAL jsonb_populate_record(NULL::ledger_contribution,
            request->'contribution' || jsonb_build_object('id', nextval(contribution_ids),
                                                          'operation_id', operation->'id')) r
        WHERE outcome = 'accepted' AND request->'contribution' <> 'null'
    )
    SELECT array_agg(request->'audit' || jsonb_build_object(
               'operation_id', operation->'id',
               'kind', CASE outcome WHEN 'accepted' THEN 'reserved' WHEN 'duplicate' THEN 'duplicate_delivery'
                                    ELSE 'conflict_detected' END,
               'to_state', CASE WHEN outcome = 'accepted' THEN operation->>'state' ELSE '' END,
               'message', left(CASE WHEN outcome = 'conflict'
                                    THEN 'conflict ' || (conflict->>'id') || ': ' || coalesce(fields, '') || ' differ'
                                    ELSE 'delivery ' || delivery_id || ' via ' || (request->>'source') END, 500))
               ORDER BY place),
           jsonb_agg(jsonb_build_object('outcome', outcome, 'key', operation->'key', 'conflict', conflict)
               ORDER BY place),
           count(*) FILTER (WHERE outcome = 'accepted')
    INTO audits, results, accepted
    FROM decided LEFT JOIN conflicts USING (place);

    -- The audit chain last, as ledger.audit.append does: locked until the commit, then read (a
    -- statement of its own, after the lock: it sees what the lock's previous holder committed).
    PERFORM pg_advisory_xact_lock((request->>'chain_lock')::bigint);
    SELECT hash INTO previous FROM ledger_auditevent
    WHERE workspace_id = workspace AND hash <> '' ORDER BY id DESC LIMIT 1;
    previous := coalesce(previous, '');
    FOR place IN 1 .. array_length(audits, 1) LOOP
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

    RETURN jsonb_build_object('wake', wake, 'operations', operations, 'results', results);
END
$$;
"""


def create_functions(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(AUDIT_HASH, params=None)
        schema_editor.execute(RESERVE, params=None)


def drop_functions(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS ledger_reserve(jsonb)", params=None)
        schema_editor.execute("DROP FUNCTION IF EXISTS ledger_operations_of(bigint, text[])", params=None)
        schema_editor.execute("DROP FUNCTION IF EXISTS ledger_audit_hash(jsonb)", params=None)
        schema_editor.execute("DROP FUNCTION IF EXISTS ledger_audit_field(text)", params=None)


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
        migrations.RunPython(create_functions, drop_functions),
    ]
