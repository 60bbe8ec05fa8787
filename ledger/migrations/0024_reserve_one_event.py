"""``ledger_reserve_one``: what ``ledger_reserve`` (0009) does, for a request of one event and no
refused delivery, the shape of nearly every request (a single POST, one event from the command line).

``ledger_reserve`` is set-based so that a batch of 500 costs a handful of statements; one event
pays for that shape: eleven statements, CTEs whose plans open the conflict and contribution tables
and their indexes even when nothing goes there, aggregations into arrays and back, and a catalog
lookup for each of five sequences. Timed on this machine (bench/ and docs/performance.md), one
new event took ~0.88 ms a call in autocommit, against ~0.65 ms here: plain statements, one per row
written, the sequences named as Django names them (``<table>_id_seq``) and resolved once per plan.

The request and the answer are those of ``ledger_reserve``, and so are the rules: the key read
first (a duplicate reserves nothing), else ``INSERT .. ON CONFLICT DO NOTHING`` decides who
reserves it (DESIGN.md rule 2), a loser reading the winner's row in a statement of its own; the
delivery final from the start; the conflict with its differences; the person behind a new
operation; the audit event on the workspace's chain; the coalesced wake-up.
tests/ledger/intake/test_reserve_one.py holds the two functions to the same rows.

The wake-up is one function both call, ``ledger_take_wakeup`` (``ledger_reserve`` is made again:
0009's text with its own copy of those steps replaced by the call; a call costs nothing
measurable, unlike ``ledger_audit_append``'s, which is why the audit chain stays written in each).
Both texts of ``ledger_reserve`` are written out here, the new one and 0009's, which unapplying
this migration makes again: a migration carries its SQL as it was, and imports no other.
"""

from django.db import migrations

# ledger.core.nudges.request_processing in SQL: a pending wake-up is kept, KEY SHARE-locked until the
# caller commits (the task that takes it waits, then claims what the caller wrote); else the
# caller's is it. True when the caller took it (and so enqueues a task after its commit).
TAKE_WAKEUP = """
CREATE OR REPLACE FUNCTION ledger_take_wakeup(at timestamptz) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM 1 FROM ledger_wakeup WHERE name = 'process' FOR KEY SHARE;
    IF FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO ledger_wakeup (name, requested_at) VALUES ('process', at) ON CONFLICT DO NOTHING;
    IF FOUND THEN
        RETURN true;
    END IF;
    -- Another transaction inserted it meanwhile (the INSERT waited for its commit): keep it.
    PERFORM 1 FROM ledger_wakeup WHERE name = 'process' FOR KEY SHARE;
    RETURN false;
END
$$;
"""

# ledger_reserve (0009) with its steps of the wake-up, from its test of ``accepted`` to its RETURN,
# replaced by the call (and ledger_operations_of, which 0009 made with it, made again as it was).
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
        wake := ledger_take_wakeup((request->>'now')::timestamptz);
    END IF;

    RETURN jsonb_build_object('wake', wake, 'operations', operations, 'results', results);
END
$$;
"""
# CREATE OR REPLACE resets a function's settings: 0022's is set again after each.
GENERIC_PLANS = "ALTER FUNCTION ledger_reserve(jsonb) SET plan_cache_mode = force_generic_plan"

RESERVE_ONE = """
CREATE OR REPLACE FUNCTION ledger_reserve_one(request jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    workspace bigint := (request->>'workspace_id')::bigint;
    incoming jsonb := request->'events'->0->'operation';
    operation ledger_operation;
    created boolean := false;
    outcome text;
    delivery_id bigint := nextval('ledger_delivery_id_seq');
    differences jsonb;
    conflict jsonb;
    message text;
    previous text;
    audit jsonb;
    wake boolean := false;
BEGIN
    SELECT * INTO operation FROM ledger_operation WHERE workspace_id = workspace AND key = incoming->>'key';
    IF NOT FOUND THEN
        INSERT INTO ledger_operation
        SELECT r.* FROM jsonb_populate_record(NULL::ledger_operation, request->'operation' || incoming
                                              || jsonb_build_object('id', nextval('ledger_operation_id_seq'))) r
        ON CONFLICT ON CONSTRAINT operation_unique_key DO NOTHING
        RETURNING * INTO operation;
        created := FOUND;
        IF NOT created THEN
            -- Reserved by another transaction since the read above (the INSERT waited for its
            -- commit): a statement of its own sees that commit.
            SELECT * INTO operation FROM ledger_operation WHERE workspace_id = workspace AND key = incoming->>'key';
        END IF;
    END IF;
    outcome := CASE WHEN created THEN 'accepted'
                    WHEN operation.fingerprint = incoming->>'fingerprint' THEN 'duplicate'
                    ELSE 'conflict' END;

    INSERT INTO ledger_delivery
    SELECT r.* FROM jsonb_populate_record(NULL::ledger_delivery,
        request->'delivery' || (request->'events'->0->'delivery') || jsonb_build_object(
            'action', incoming->'action', 'key', incoming->'key', 'correlation_id', incoming->'correlation_id',
            'id', delivery_id, 'operation_id', operation.id, 'outcome', outcome)) r;

    IF outcome = 'conflict' THEN
        SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'field', name, 'recorded', coalesce(operation.payload->name, 'null'),
                   'incoming', coalesce(incoming->'payload'->name, 'null')) ORDER BY n), '[]')
        INTO differences
        FROM jsonb_array_elements_text(request->'fingerprint_fields'->(incoming->>'action'))
             WITH ORDINALITY AS names(name, n)
        WHERE (operation.payload->name) IS DISTINCT FROM (incoming->'payload'->name);
        conflict := request->'conflict' || jsonb_build_object(
            'id', nextval('ledger_conflict_id_seq'), 'operation_id', operation.id, 'delivery_id', delivery_id,
            'incoming_fingerprint', incoming->'fingerprint', 'incoming_payload', incoming->'payload',
            'differences', differences);
        INSERT INTO ledger_conflict SELECT r.* FROM jsonb_populate_record(NULL::ledger_conflict, conflict) r;
        message := 'conflict ' || (conflict->>'id') || ': '
                   || coalesce((SELECT string_agg(d->>'field', ', ') FROM jsonb_array_elements(differences) AS ds(d)), '')
                   || ' differ';
    ELSE
        message := 'delivery ' || delivery_id || ' via ' || (request->>'source');
    END IF;

    IF created AND request->'contribution' <> 'null' THEN
        INSERT INTO ledger_contribution
        SELECT r.* FROM jsonb_populate_record(NULL::ledger_contribution, request->'contribution'
            || jsonb_build_object('id', nextval('ledger_contribution_id_seq'), 'operation_id', operation.id)) r;
    END IF;

    -- The audit chain, as in ledger_reserve: locked until the commit, then its head read in a
    -- statement of its own (it sees what the lock's previous holder committed). Written here
    -- rather than by calling ledger_audit_append, which cost ~90 µs more for one event.
    PERFORM pg_advisory_xact_lock((request->>'chain_lock')::bigint);
    SELECT hash INTO previous FROM ledger_auditevent
    WHERE workspace_id = workspace AND hash <> '' ORDER BY id DESC LIMIT 1;
    audit := request->'audit' || jsonb_build_object(
        'operation_id', operation.id,
        'kind', CASE outcome WHEN 'accepted' THEN 'reserved' WHEN 'duplicate' THEN 'duplicate_delivery'
                             ELSE 'conflict_detected' END,
        'to_state', CASE WHEN created THEN operation.state ELSE '' END,
        'message', left(message, 500),
        'id', nextval('ledger_auditevent_id_seq'), 'prev_hash', coalesce(previous, ''));
    audit := audit || jsonb_build_object('hash', ledger_audit_hash(audit));
    INSERT INTO ledger_auditevent SELECT r.* FROM jsonb_populate_record(NULL::ledger_auditevent, audit) r;

    IF created THEN
        wake := ledger_take_wakeup((request->>'now')::timestamptz);
    END IF;

    RETURN jsonb_build_object(
        'wake', wake, 'operations', jsonb_build_object(operation.key, to_jsonb(operation)),
        'results', jsonb_build_array(jsonb_build_object('outcome', outcome, 'key', operation.key, 'conflict', conflict)));
END
$$;
"""


# ledger_operations_of and ledger_reserve as 0009 made them, for unapplying this migration.
RESERVE_BEFORE = """
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
        for statement in (TAKE_WAKEUP, RESERVE_ONE, RESERVE, GENERIC_PLANS):
            schema_editor.execute(statement, params=None)


def drop_functions(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in (RESERVE_BEFORE, GENERIC_PLANS, "DROP FUNCTION IF EXISTS ledger_reserve_one(jsonb)",
                          "DROP FUNCTION IF EXISTS ledger_take_wakeup(timestamptz)"):
            schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0023_drop_audit_locked_head")]

    operations = [migrations.RunPython(create_functions, drop_functions, elidable=False)]
