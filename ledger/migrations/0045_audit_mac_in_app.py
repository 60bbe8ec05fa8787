"""The audit key leaves the database: an event's MAC is computed in the application
process (ledger.core.audit_mac) and inserted as data; the database only orders the chain.

- ``ledger_audit_head`` locks a chain and reads its head with new event ids, and
  ``ledger_audit_insert`` inserts the events the application sealed; ``ledger_reserve``,
  ``ledger_reserve_one`` and ``ledger_finish_claimed`` return the events they would write with the
  head they read, for the caller to seal and insert, instead of hashing them with the key's pads.
- The functions that hashed in SQL (``ledger_audit_hash``, ``_encoding``, ``_field``, ``_no_key``)
  and ``ledger_audit_append`` are dropped: nothing in the schema hashes any more.
- A row trigger refuses an event inserted without a MAC (``hash`` or ``hash_key`` empty).
- ``AuditInstallation``: the installation's id, the moment its trail became keyed (the first keyed
  event's time, or now) and the highest id of an event of before keys, one row that a trigger
  keeps as written; exported heads carry all three.

Unapplying makes the functions of before again (the texts below, as 0044 left them).
"""

from django.db import migrations, models

AUDIT_HEAD = r"""
CREATE OR REPLACE FUNCTION public.ledger_audit_head(lock_key bigint, chain bigint, count integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    previous text;
    ids jsonb := '[]';
BEGIN
    PERFORM pg_advisory_xact_lock(lock_key);
    IF chain IS NULL THEN
        SELECT hash INTO previous FROM ledger_auditevent WHERE workspace_id IS NULL AND hash <> ''
        ORDER BY id DESC LIMIT 1;
    ELSE
        SELECT hash INTO previous FROM ledger_auditevent WHERE workspace_id = chain AND hash <> ''
        ORDER BY id DESC LIMIT 1;
    END IF;
    FOR n IN 1 .. count LOOP
        ids := ids || to_jsonb(nextval('ledger_auditevent_id_seq'));
    END LOOP;
    RETURN jsonb_build_array(coalesce(previous, ''), ids);
END
$function$
"""

AUDIT_INSERT = r"""
CREATE OR REPLACE FUNCTION public.ledger_audit_insert(events jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
BEGIN
    INSERT INTO ledger_auditevent
    SELECT r.* FROM jsonb_populate_recordset(NULL::ledger_auditevent, events) r;
END
$function$
"""

RESERVE = r"""
CREATE OR REPLACE FUNCTION public.ledger_reserve(request jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
    hold record;
    locked ledger_operation;
    held ledger_operation;
    wake boolean := false;
BEGIN
    INSERT INTO ledger_delivery
    SELECT r.* FROM jsonb_array_elements(request->'invalid') AS rows(row),
    LATERAL jsonb_populate_record(NULL::ledger_delivery, row || jsonb_build_object('id', nextval(delivery_ids))) r;

    SELECT array_agg(DISTINCT item->'operation'->>'key') INTO keys
    FROM jsonb_array_elements(request->'events') AS items(item);
    IF keys IS NULL THEN
        RETURN jsonb_build_object('wake', false, 'operations', '{}'::jsonb, 'results', '[]'::jsonb, 'audit', NULL);
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

    -- The holds (on_conflict: hold), as in ledger_reserve_one: each held operation by the request's
    -- first conflict of it, the rows locked in id order (two requests never deadlock), before the chain.
    FOR hold IN
        SELECT DISTINCT ON ((r.item->'conflict'->>'operation_id')::bigint)
               (r.item->'conflict'->>'operation_id')::bigint AS id,
               'conflict ' || (r.item->'conflict'->>'id') || ': ' || coalesce((
                   SELECT string_agg(d->>'field', ', ')
                   FROM jsonb_array_elements(r.item->'conflict'->'differences') AS ds(d)), '') || ' differ' AS message
        FROM jsonb_array_elements(results) WITH ORDINALITY AS r(item, place)
        WHERE r.item->>'outcome' = 'conflict' AND request->'hold_actions' ? (operations->(r.item->>'key')->>'action')
        ORDER BY (r.item->'conflict'->>'operation_id')::bigint, r.place
    LOOP
        SELECT * INTO locked FROM ledger_operation WHERE id = hold.id FOR NO KEY UPDATE;
        UPDATE ledger_operation
        SET state = 'needs_review', last_error_category = 'conflict', updated_at = (request->>'now')::timestamptz,
            last_error_message = left('held: a conflicting delivery arrived (' || hold.message || '); apply or '
                                      || 'dismiss it to let the operation run', 500)
        WHERE id = hold.id AND state IN ('pending', 'pending_approval') AND attempts = 0
        RETURNING * INTO held;
        -- The answer names the operation as it is now: held, or as the lock found it.
        operations := operations || jsonb_build_object(locked.key, to_jsonb(CASE WHEN FOUND THEN held ELSE locked END));
        IF FOUND THEN
            audits := audits || (request->'audit' || jsonb_build_object(
                'operation_id', held.id, 'kind', 'conflict_held', 'from_state', locked.state,
                'to_state', 'needs_review', 'error_category', 'conflict', 'message', held.last_error_message));
        END IF;
    END LOOP;

    -- The audit chain last, as ledger.core.audit_chain.append does: locked until the commit, then its
    -- head read (a statement of its own, after the lock: it sees what the lock's previous holder
    -- committed), and the events given their ids; the caller seals them after that head.
    PERFORM pg_advisory_xact_lock((request->>'chain_lock')::bigint);
    SELECT hash INTO previous FROM ledger_auditevent
    WHERE workspace_id = workspace AND hash <> '' ORDER BY id DESC LIMIT 1;
    FOR place IN 1 .. array_length(audits, 1) LOOP
        audits[place] := audits[place] || jsonb_build_object('id', nextval(audit_ids));
    END LOOP;

    -- The wake-up (ledger.nudges.request_processing): a pending one is kept, KEY SHARE-locked until
    -- this commits (the task that takes it waits, then claims what this wrote); else this one is it.
    IF accepted > 0 THEN
        wake := ledger_take_wakeup((request->>'now')::timestamptz);
    END IF;

    RETURN jsonb_build_object('wake', wake, 'operations', operations, 'results', results,
                              'audit', jsonb_build_array(coalesce(previous, ''), to_jsonb(audits)));
END
$function$
"""

RESERVE_ONE = r"""
CREATE OR REPLACE FUNCTION public.ledger_reserve_one(request jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
    locked ledger_operation;
    held ledger_operation;
    previous text;
    audits jsonb;
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
        -- The hold (on_conflict: hold): the row locked first, so a claim, an approval or a person's
        -- release of it is either seen committed or waits for this commit; then moved only from a
        -- state where it has not run (ledger.states.HOLDABLE_STATES), before the chain below.
        IF request->'hold_actions' ? (incoming->>'action') THEN
            SELECT * INTO locked FROM ledger_operation WHERE id = operation.id FOR NO KEY UPDATE;
            UPDATE ledger_operation
            SET state = 'needs_review', last_error_category = 'conflict', updated_at = (request->>'now')::timestamptz,
                last_error_message = left('held: a conflicting delivery arrived (' || message || '); apply or '
                                          || 'dismiss it to let the operation run', 500)
            WHERE id = operation.id AND state IN ('pending', 'pending_approval') AND attempts = 0
            RETURNING * INTO held;
            -- The answer names the operation as it is now: held, or as the lock found it (a claim
            -- that committed meanwhile made it processing).
            operation := CASE WHEN FOUND THEN held ELSE locked END;
        END IF;
    ELSE
        message := 'delivery ' || delivery_id || ' via ' || (request->>'source');
    END IF;

    IF created AND request->'contribution' <> 'null' THEN
        INSERT INTO ledger_contribution
        SELECT r.* FROM jsonb_populate_record(NULL::ledger_contribution, request->'contribution'
            || jsonb_build_object('id', nextval('ledger_contribution_id_seq'), 'operation_id', operation.id)) r;
    END IF;

    -- The audit chain, as in ledger_reserve: locked until the commit, then its head read in a
    -- statement of its own (it sees what the lock's previous holder committed); the events get
    -- their ids here and are sealed and inserted by the caller.
    PERFORM pg_advisory_xact_lock((request->>'chain_lock')::bigint);
    SELECT hash INTO previous FROM ledger_auditevent
    WHERE workspace_id = workspace AND hash <> '' ORDER BY id DESC LIMIT 1;
    audits := jsonb_build_array(request->'audit' || jsonb_build_object(
        'operation_id', operation.id,
        'kind', CASE outcome WHEN 'accepted' THEN 'reserved' WHEN 'duplicate' THEN 'duplicate_delivery'
                             ELSE 'conflict_detected' END,
        'to_state', CASE WHEN created THEN operation.state ELSE '' END,
        'message', left(message, 500),
        'id', nextval('ledger_auditevent_id_seq')));
    IF held.id IS NOT NULL THEN
        audits := audits || jsonb_build_array(request->'audit' || jsonb_build_object(
            'operation_id', operation.id, 'kind', 'conflict_held', 'from_state', locked.state,
            'to_state', 'needs_review', 'error_category', 'conflict', 'message', operation.last_error_message,
            'id', nextval('ledger_auditevent_id_seq')));
    END IF;

    IF created THEN
        wake := ledger_take_wakeup((request->>'now')::timestamptz);
    END IF;

    RETURN jsonb_build_object(
        'wake', wake, 'operations', jsonb_build_object(operation.key, to_jsonb(operation)),
        'results', jsonb_build_array(jsonb_build_object('outcome', outcome, 'key', operation.key, 'conflict', conflict)),
        'audit', jsonb_build_array(coalesce(previous, ''), audits));
END
$function$
"""

FINISH_CLAIMED = r"""
CREATE OR REPLACE FUNCTION public.ledger_finish_claimed(request jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    at timestamptz := (request->>'now')::timestamptz;
    changed int;
    held jsonb;
    chain jsonb;
    events jsonb;
    head jsonb;
    chains jsonb := '[]';
BEGIN
    UPDATE ledger_operation o
    SET state = 'succeeded', attempts = o.attempts + 1, fencing_token = o.fencing_token + 1,
        result = h.result, external_id = h.external_id, updated_at = at, state_changed_at = at, lease_owner = '',
        lease_expires_at = NULL, next_attempt_at = NULL, last_error_category = '', last_error_message = ''
    FROM jsonb_to_recordset(request->'operations')
         AS h(id bigint, fencing_token bigint, result jsonb, external_id text)
    WHERE o.id = h.id AND o.fencing_token = h.fencing_token AND o.state IN ('pending', 'retrying');
    GET DIAGNOSTICS changed = ROW_COUNT;
    IF changed <> jsonb_array_length(request->'operations') THEN
        RETURN jsonb_build_object('changed', changed, 'chains', chains);
    END IF;

    -- Each operation with its Attempt (numbered by the claim's new token), in the given order.
    SELECT jsonb_agg(jsonb_build_object('operation', given.o, 'attempt', request->'attempt' || jsonb_build_object(
               'id', nextval('ledger_attempt_id_seq'), 'operation_id', given.o->'id',
               'number', (given.o->>'fencing_token')::bigint + 1,
               'fencing_token', (given.o->>'fencing_token')::bigint + 1,
               'external_id', given.o->'external_id', 'config_version_id', given.o->'config_version_id'))
           ORDER BY given.n)
    INTO held
    FROM jsonb_array_elements(request->'operations') WITH ORDINALITY AS given(o, n);
    INSERT INTO ledger_attempt
    SELECT r.* FROM jsonb_array_elements(held) AS h(row),
                    LATERAL jsonb_populate_record(NULL::ledger_attempt, h.row->'attempt') r;

    -- One event per operation for the one change a reader can see (the row is never processing
    -- in a committed state), the claim's token in its message, on each workspace's chain in turn
    -- (the chains sorted, as ledger.core.audit_chain.append takes them, so no two appenders
    -- deadlock): each locked and its head read, the events given their ids in order.
    FOR chain IN SELECT c FROM jsonb_array_elements(request->'chains') AS chains(c) LOOP
        SELECT jsonb_agg(request->'audit' || jsonb_build_object(
                   'workspace_id', h.row->'operation'->'workspace_id', 'operation_id', h.row->'operation'->'id',
                   'kind', 'succeeded', 'from_state', h.row->'operation'->'from_state', 'to_state', 'succeeded',
                   'message', 'claim ' || (h.row->'attempt'->>'fencing_token') || ', finished in it',
                   'attempt_id', h.row->'attempt'->'id') ORDER BY n)
        INTO events
        FROM jsonb_array_elements(held) WITH ORDINALITY AS h(row, n)
        WHERE h.row->'operation'->'workspace_id' = chain->0;
        head := ledger_audit_head((chain->>1)::bigint, (chain->>0)::bigint, jsonb_array_length(events));
        SELECT jsonb_agg(e.event || jsonb_build_object('id', head->1->((e.n - 1)::int)) ORDER BY e.n) INTO events
        FROM jsonb_array_elements(events) WITH ORDINALITY AS e(event, n);
        chains := chains || jsonb_build_array(jsonb_build_array(head->0, events));
    END LOOP;

    RETURN jsonb_build_object('changed', changed, 'chains', chains);
END
$function$
"""

AUDIT_FIELD_BEFORE = r"""
CREATE OR REPLACE FUNCTION public.ledger_audit_field(value text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$ SELECT octet_length(coalesce(value, ''))::text || ':' || coalesce(value, '') $function$
"""

AUDIT_ENCODING_BEFORE = r"""
CREATE OR REPLACE FUNCTION public.ledger_audit_encoding(event jsonb)
 RETURNS bytea
 LANGUAGE sql
 STABLE
AS $function$
SELECT convert_to(
    ledger_audit_field(event->>'prev_hash') || ledger_audit_field(event->>'workspace_id')
    || ledger_audit_field(event->>'operation_id') || ledger_audit_field(event->>'attempt_id')
    || ledger_audit_field(event->>'actor') || ledger_audit_field(event->>'kind')
    || ledger_audit_field(event->>'from_state') || ledger_audit_field(event->>'to_state')
    || ledger_audit_field(event->>'error_category') || ledger_audit_field(event->>'message')
    || ledger_audit_field((extract(epoch FROM (event->>'created_at')::timestamptz) * 1000000)::bigint::text)
    || CASE WHEN event->>'times' IS NULL THEN '' ELSE ledger_audit_field(event->>'times') END,
    'UTF8')
$function$
"""

AUDIT_NO_KEY_BEFORE = r"""
CREATE OR REPLACE FUNCTION public.ledger_audit_no_key(key_id text)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RAISE EXCEPTION 'audit event hashed under key id % without its key (ledger.audit.keyed puts it in the row)', key_id;
END
$function$
"""

AUDIT_HASH_BEFORE = r"""
CREATE OR REPLACE FUNCTION public.ledger_audit_hash(event jsonb)
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$
SELECT CASE WHEN coalesce(event->>'hash_key', '') = '' THEN encode(sha256(ledger_audit_encoding(event)), 'hex')
            ELSE coalesce(encode(sha256(decode(event->>'audit_opad', 'hex')
                                        || sha256(decode(event->>'audit_ipad', 'hex') || ledger_audit_encoding(event))),
                                 'hex'),
                          ledger_audit_no_key(event->>'hash_key')) END
$function$
"""

AUDIT_APPEND_BEFORE = r"""
CREATE OR REPLACE FUNCTION public.ledger_audit_append(lock_key bigint, chain bigint, events jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
$function$
"""

RESERVE_BEFORE = r"""
CREATE OR REPLACE FUNCTION public.ledger_reserve(request jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
    hold record;
    locked ledger_operation;
    held ledger_operation;
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

    -- The holds (on_conflict: hold), as in ledger_reserve_one: each held operation by the request's
    -- first conflict of it, the rows locked in id order (two requests never deadlock), before the chain.
    FOR hold IN
        SELECT DISTINCT ON ((r.item->'conflict'->>'operation_id')::bigint)
               (r.item->'conflict'->>'operation_id')::bigint AS id,
               'conflict ' || (r.item->'conflict'->>'id') || ': ' || coalesce((
                   SELECT string_agg(d->>'field', ', ')
                   FROM jsonb_array_elements(r.item->'conflict'->'differences') AS ds(d)), '') || ' differ' AS message
        FROM jsonb_array_elements(results) WITH ORDINALITY AS r(item, place)
        WHERE r.item->>'outcome' = 'conflict' AND request->'hold_actions' ? (operations->(r.item->>'key')->>'action')
        ORDER BY (r.item->'conflict'->>'operation_id')::bigint, r.place
    LOOP
        SELECT * INTO locked FROM ledger_operation WHERE id = hold.id FOR NO KEY UPDATE;
        UPDATE ledger_operation
        SET state = 'needs_review', last_error_category = 'conflict', updated_at = (request->>'now')::timestamptz,
            last_error_message = left('held: a conflicting delivery arrived (' || hold.message || '); apply or '
                                      || 'dismiss it to let the operation run', 500)
        WHERE id = hold.id AND state IN ('pending', 'pending_approval') AND attempts = 0
        RETURNING * INTO held;
        -- The answer names the operation as it is now: held, or as the lock found it.
        operations := operations || jsonb_build_object(locked.key, to_jsonb(CASE WHEN FOUND THEN held ELSE locked END));
        IF FOUND THEN
            audits := audits || (request->'audit' || jsonb_build_object(
                'operation_id', held.id, 'kind', 'conflict_held', 'from_state', locked.state,
                'to_state', 'needs_review', 'error_category', 'conflict', 'message', held.last_error_message));
        END IF;
    END LOOP;

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
$function$
"""

RESERVE_ONE_BEFORE = r"""
CREATE OR REPLACE FUNCTION public.ledger_reserve_one(request jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
    locked ledger_operation;
    held ledger_operation;
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
        -- The hold (on_conflict: hold): the row locked first, so a claim, an approval or a person's
        -- release of it is either seen committed or waits for this commit; then moved only from a
        -- state where it has not run (ledger.states.HOLDABLE_STATES), before the chain below.
        IF request->'hold_actions' ? (incoming->>'action') THEN
            SELECT * INTO locked FROM ledger_operation WHERE id = operation.id FOR NO KEY UPDATE;
            UPDATE ledger_operation
            SET state = 'needs_review', last_error_category = 'conflict', updated_at = (request->>'now')::timestamptz,
                last_error_message = left('held: a conflicting delivery arrived (' || message || '); apply or '
                                          || 'dismiss it to let the operation run', 500)
            WHERE id = operation.id AND state IN ('pending', 'pending_approval') AND attempts = 0
            RETURNING * INTO held;
            -- The answer names the operation as it is now: held, or as the lock found it (a claim
            -- that committed meanwhile made it processing).
            operation := CASE WHEN FOUND THEN held ELSE locked END;
        END IF;
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
    IF held.id IS NOT NULL THEN
        audit := request->'audit' || jsonb_build_object(
            'operation_id', operation.id, 'kind', 'conflict_held', 'from_state', locked.state,
            'to_state', 'needs_review', 'error_category', 'conflict', 'message', operation.last_error_message,
            'id', nextval('ledger_auditevent_id_seq'), 'prev_hash', audit->>'hash');
        audit := audit || jsonb_build_object('hash', ledger_audit_hash(audit));
        INSERT INTO ledger_auditevent SELECT r.* FROM jsonb_populate_record(NULL::ledger_auditevent, audit) r;
    END IF;

    IF created THEN
        wake := ledger_take_wakeup((request->>'now')::timestamptz);
    END IF;

    RETURN jsonb_build_object(
        'wake', wake, 'operations', jsonb_build_object(operation.key, to_jsonb(operation)),
        'results', jsonb_build_array(jsonb_build_object('outcome', outcome, 'key', operation.key, 'conflict', conflict)));
END
$function$
"""

FINISH_CLAIMED_BEFORE = r"""
CREATE OR REPLACE FUNCTION public.ledger_finish_claimed(request jsonb)
 RETURNS integer
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    at timestamptz := (request->>'now')::timestamptz;
    changed int;
    held jsonb;
    chain jsonb;
    events jsonb;
BEGIN
    UPDATE ledger_operation o
    SET state = 'succeeded', attempts = o.attempts + 1, fencing_token = o.fencing_token + 1,
        result = h.result, external_id = h.external_id, updated_at = at, state_changed_at = at, lease_owner = '',
        lease_expires_at = NULL, next_attempt_at = NULL, last_error_category = '', last_error_message = ''
    FROM jsonb_to_recordset(request->'operations')
         AS h(id bigint, fencing_token bigint, result jsonb, external_id text)
    WHERE o.id = h.id AND o.fencing_token = h.fencing_token AND o.state IN ('pending', 'retrying');
    GET DIAGNOSTICS changed = ROW_COUNT;
    IF changed <> jsonb_array_length(request->'operations') THEN
        RETURN changed;
    END IF;

    -- Each operation with its Attempt (numbered by the claim's new token), in the given order.
    SELECT jsonb_agg(jsonb_build_object('operation', given.o, 'attempt', request->'attempt' || jsonb_build_object(
               'id', nextval('ledger_attempt_id_seq'), 'operation_id', given.o->'id',
               'number', (given.o->>'fencing_token')::bigint + 1,
               'fencing_token', (given.o->>'fencing_token')::bigint + 1,
               'external_id', given.o->'external_id', 'config_version_id', given.o->'config_version_id'))
           ORDER BY given.n)
    INTO held
    FROM jsonb_array_elements(request->'operations') WITH ORDINALITY AS given(o, n);
    INSERT INTO ledger_attempt
    SELECT r.* FROM jsonb_array_elements(held) AS h(row),
                    LATERAL jsonb_populate_record(NULL::ledger_attempt, h.row->'attempt') r;

    -- One event per operation for the one change a reader can see (the row is never processing
    -- in a committed state), the claim's token in its message, on each workspace's chain in turn
    -- (the chains sorted, as ledger.audit.append takes them, so no two appenders deadlock).
    FOR chain IN SELECT c FROM jsonb_array_elements(request->'chains') AS chains(c) LOOP
        SELECT jsonb_agg(request->'audit' || jsonb_build_object(
                   'workspace_id', h.row->'operation'->'workspace_id', 'operation_id', h.row->'operation'->'id',
                   'kind', 'succeeded', 'from_state', h.row->'operation'->'from_state', 'to_state', 'succeeded',
                   'message', 'claim ' || (h.row->'attempt'->>'fencing_token') || ', finished in it',
                   'attempt_id', h.row->'attempt'->'id') ORDER BY n)
        INTO events
        FROM jsonb_array_elements(held) WITH ORDINALITY AS h(row, n)
        WHERE h.row->'operation'->'workspace_id' = chain->0;
        PERFORM ledger_audit_append((chain->>1)::bigint, (chain->>0)::bigint, events);
    END LOOP;

    RETURN changed;
END
$function$
"""

APPEND_ONLY_BEFORE = r"""
CREATE OR REPLACE FUNCTION public.ledger_audit_append_only()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    RAISE EXCEPTION 'ledger_auditevent is append-only: % refused', TG_OP;
END;
$function$
"""

NO_TRUNCATE_BEFORE = r"""
CREATE OR REPLACE FUNCTION public.ledger_audit_no_truncate()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    RAISE EXCEPTION 'ledger_auditevent is append-only: TRUNCATE refused';
END;
$function$
"""

APPEND_ONLY = r"""
CREATE OR REPLACE FUNCTION public.ledger_audit_append_only()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP;
END;
$function$
"""

NO_TRUNCATE = r"""
CREATE OR REPLACE FUNCTION public.ledger_audit_no_truncate()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    RAISE EXCEPTION '% is append-only: TRUNCATE refused', TG_TABLE_NAME;
END;
$function$
"""

AUDIT_UNKEYED = r"""
CREATE OR REPLACE FUNCTION public.ledger_audit_unkeyed()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    RAISE EXCEPTION 'audit event refused: it has no MAC under an audit key (hash %, hash_key %)',
        quote_literal(NEW.hash), quote_literal(NEW.hash_key);
END;
$function$
"""

TRIGGERS = """
CREATE TRIGGER ledger_auditevent_keyed BEFORE INSERT ON public.ledger_auditevent FOR EACH ROW
    WHEN (NEW.hash = '' OR NEW.hash_key = '') EXECUTE FUNCTION ledger_audit_unkeyed();
CREATE TRIGGER ledger_auditinstallation_fixed BEFORE DELETE OR UPDATE ON public.ledger_auditinstallation
    FOR EACH ROW EXECUTE FUNCTION ledger_audit_append_only();
CREATE TRIGGER ledger_auditinstallation_no_truncate BEFORE TRUNCATE ON public.ledger_auditinstallation
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_audit_no_truncate();
"""

TRIGGERS_BEFORE = """
DROP TRIGGER ledger_auditevent_keyed ON public.ledger_auditevent;
DROP TRIGGER ledger_auditinstallation_fixed ON public.ledger_auditinstallation;
DROP TRIGGER ledger_auditinstallation_no_truncate ON public.ledger_auditinstallation;
DROP FUNCTION public.ledger_audit_unkeyed();
"""

# The installation: a new id, keyed since the first keyed event (every event after it is keyed:
# from migration 0030 on, appends refused to hash without a key), or since now on a new database;
# and the highest id of an event of before keys (or before chaining), 0 for none.
INSTALLATION = """
INSERT INTO ledger_auditinstallation (id, installation, keyed_since, unkeyed_until)
SELECT 1, gen_random_uuid(),
    coalesce((SELECT created_at FROM ledger_auditevent WHERE hash_key <> '' ORDER BY created_at, id LIMIT 1), now()),
    coalesce((SELECT max(id) FROM ledger_auditevent WHERE hash = '' OR hash_key = ''), 0)
"""

DROP_HASHING = """
DROP FUNCTION public.ledger_audit_append(bigint, bigint, jsonb);
DROP FUNCTION public.ledger_audit_hash(jsonb);
DROP FUNCTION public.ledger_audit_encoding(jsonb);
DROP FUNCTION public.ledger_audit_no_key(text);
DROP FUNCTION public.ledger_audit_field(text);
"""


class Migration(migrations.Migration):
    dependencies = [("ledger", "0044_finish_claimed_one_event")]

    operations = [
        migrations.CreateModel(
            name="AuditInstallation",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("installation", models.UUIDField(unique=True)),
                ("keyed_since", models.DateTimeField()),
                ("unkeyed_until", models.BigIntegerField(default=0)),
            ],
            options={
                "constraints": [models.CheckConstraint(condition=models.Q(("id", 1)), name="audit_installation_one_row")],
            },
        ),
        migrations.RunSQL(INSTALLATION, reverse_sql=migrations.RunSQL.noop),
        migrations.RunSQL(
            [AUDIT_HEAD, AUDIT_INSERT, RESERVE, RESERVE_ONE, "DROP FUNCTION public.ledger_finish_claimed(jsonb)", FINISH_CLAIMED],
            reverse_sql=[
                AUDIT_FIELD_BEFORE,
                AUDIT_ENCODING_BEFORE,
                AUDIT_NO_KEY_BEFORE,
                AUDIT_HASH_BEFORE,
                AUDIT_APPEND_BEFORE,
                RESERVE_BEFORE,
                RESERVE_ONE_BEFORE,
                "DROP FUNCTION public.ledger_finish_claimed(jsonb)",
                FINISH_CLAIMED_BEFORE,
                "DROP FUNCTION public.ledger_audit_head(bigint, bigint, integer)",
                "DROP FUNCTION public.ledger_audit_insert(jsonb)",
            ],
        ),
        migrations.RunSQL(DROP_HASHING, reverse_sql=migrations.RunSQL.noop),
        migrations.RunSQL(
            [APPEND_ONLY, NO_TRUNCATE, AUDIT_UNKEYED, TRIGGERS],
            reverse_sql=[TRIGGERS_BEFORE, APPEND_ONLY_BEFORE, NO_TRUNCATE_BEFORE],
        ),
    ]
