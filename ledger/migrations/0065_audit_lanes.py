"""Audit lanes: a workspace's events may go to several chains (``Workspace.audit_lanes``, 1 unless
set), each with its own lock, so that a large tenant's appends are not all serialised on one.

- ``ledger_workspace.audit_lanes`` (1 to 64) and ``ledger_auditevent.lane`` (0 for every event
  there is: lane 0 is the chain each workspace had, its lock key the same, its events' MACs the same
  bytes), with ``audit_lane_idx`` for the lanes past 0 (partial: empty until a workspace has more
  than one lane; ``lane <> 0``, so that verification finds every lane there is, a made-up
  negative one too). Nothing is rewritten, but the column's CHECK and the index each read every
  partition once, and appends wait for the index (a partitioned table's index is not built
  CONCURRENTLY): on a large trail, migrate at a quiet hour.
- ``ledger_audit_lane`` (an operation's lane: a stable hash of its id) and ``ledger_chain_lock``
  (a lane's advisory lock key) are new; ``ledger_chain_head`` reads a lane's head, and
  ``ledger_audit_head`` now takes the events' operations, reads the workspace's lane count, locks
  the lanes they go to in order and answers the heads by lane (both replace the functions of the same
  name, whose arguments differ). ``ledger_reserve``, ``ledger_reserve_one``, ``ledger_claim``,
  ``ledger_report_outcome`` and ``ledger_finish_claimed`` append through it: their events carry
  their lane, their heads come by lane, and the lock keys are no longer sent by the application.
- ``ledger_audit_partitions`` makes a month's partition with the trail's CHECK constraints (the
  lane's is one), which attaching it requires.

Unapplying restores the functions of before and drops the columns: the events of lanes past 0
would then be read as their workspace's one chain, which they do not form, so unapply only where no
workspace has had more than one lane.
"""

from django.db import migrations, models

AUDIT_LANE = r"""
CREATE OR REPLACE FUNCTION public.ledger_audit_lane(operation bigint, lanes integer)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT CASE WHEN operation IS NULL OR lanes <= 1 THEN 0
                ELSE ((operation % 2147483648) * 2654435761 % 4294967296 / 65536 % lanes)::integer END
$function$
"""

CHAIN_LOCK = r"""
CREATE OR REPLACE FUNCTION public.ledger_chain_lock(chain bigint, lane integer)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT (CASE WHEN lane = 0 THEN x'41554454'::bigint ELSE x'41554c00'::bigint | lane END << 32) | coalesce(chain, 0)
$function$
"""

CHAIN_HEAD = r"""
CREATE OR REPLACE FUNCTION public.ledger_chain_head(chain bigint, chain_lane integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    recent timestamptz := date_trunc('month', now(), 'UTC') - interval '1 month';
    head record;
BEGIN
    IF chain IS NULL THEN
        SELECT hash, created_at INTO head FROM ledger_auditevent
        WHERE workspace_id IS NULL AND lane = 0 AND hash <> '' AND created_at >= recent ORDER BY id DESC LIMIT 1;
        IF NOT FOUND THEN
            SELECT hash, created_at INTO head FROM ledger_auditevent
            WHERE workspace_id IS NULL AND lane = 0 AND hash <> '' ORDER BY id DESC LIMIT 1;
        END IF;
    ELSIF chain_lane = 0 THEN
        SELECT hash, created_at INTO head FROM ledger_auditevent
        WHERE workspace_id = chain AND lane = 0 AND hash <> '' AND created_at >= recent ORDER BY id DESC LIMIT 1;
        IF NOT FOUND THEN
            SELECT hash, created_at INTO head FROM ledger_auditevent
            WHERE workspace_id = chain AND lane = 0 AND hash <> '' ORDER BY id DESC LIMIT 1;
        END IF;
    ELSE
        SELECT hash, created_at INTO head FROM ledger_auditevent
        WHERE workspace_id = chain AND lane = chain_lane AND lane <> 0 AND hash <> '' AND created_at >= recent
        ORDER BY id DESC LIMIT 1;
        IF NOT FOUND THEN
            SELECT hash, created_at INTO head FROM ledger_auditevent
            WHERE workspace_id = chain AND lane = chain_lane AND lane <> 0 AND hash <> '' ORDER BY id DESC LIMIT 1;
        END IF;
    END IF;
    RETURN jsonb_build_array(coalesce(head.hash, ''), head.created_at);
END
$function$
"""

AUDIT_HEAD = r"""
CREATE OR REPLACE FUNCTION public.ledger_audit_head(chain bigint, operations bigint[], every_lane boolean)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    lanes integer := 1;
    event_lanes integer[];
    heads jsonb := '{}';
    ids jsonb := '[]';
    each_lane integer;
BEGIN
    IF chain IS NOT NULL THEN
        lanes := coalesce((SELECT w.audit_lanes FROM ledger_workspace w WHERE w.id = chain), 1);
    END IF;
    SELECT coalesce(array_agg(ledger_audit_lane(o.operation, lanes) ORDER BY o.n), '{}') INTO event_lanes
    FROM unnest(operations) WITH ORDINALITY AS o(operation, n);
    FOR each_lane IN
        SELECT DISTINCT l.lane
        FROM unnest(CASE WHEN every_lane THEN ARRAY(SELECT generate_series(0, lanes - 1)) ELSE event_lanes END) AS l(lane)
        ORDER BY l.lane
    LOOP
        PERFORM pg_advisory_xact_lock(ledger_chain_lock(chain, each_lane));
        IF each_lane = ANY(event_lanes) THEN
            heads := heads || jsonb_build_object(each_lane::text, ledger_chain_head(chain, each_lane));
        END IF;
    END LOOP;
    FOR n IN 1 .. cardinality(operations) LOOP
        ids := ids || to_jsonb(nextval('ledger_auditevent_id_seq'));
    END LOOP;
    RETURN jsonb_build_object('heads', heads, 'lanes', to_jsonb(event_lanes), 'ids', ids);
END
$function$
"""

RESERVE = r"""
CREATE OR REPLACE FUNCTION public.ledger_reserve(request jsonb, event_actions text[], event_keys text[], event_definition_versions text[], event_fingerprints text[], event_payloads jsonb[], event_correlation_ids text[], event_states text[], event_deadlines timestamp with time zone[], event_series text[], event_versions integer[], event_ordered text[], event_sender_delivery_ids text[], event_occurred timestamp with time zone[])
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    workspace bigint := (request->>'workspace_id')::bigint;
    operation_ids regclass := pg_get_serial_sequence('ledger_operation', 'id')::regclass;
    delivery_ids regclass := pg_get_serial_sequence('ledger_delivery', 'id')::regclass;
    conflict_ids regclass := pg_get_serial_sequence('ledger_conflict', 'id')::regclass;
    contribution_ids regclass := pg_get_serial_sequence('ledger_contribution', 'id')::regclass;
    keys text[];
    -- The columns every row of a table shares, read once (what an event varies comes in the arrays).
    shared_operation ledger_operation := jsonb_populate_record(NULL::ledger_operation, request->'operation');
    shared_delivery ledger_delivery := jsonb_populate_record(NULL::ledger_delivery, request->'delivery');
    operations jsonb;
    created bigint[] := '{}';
    taken text[];
    audits jsonb[];
    results jsonb;
    accepted int;
    chain jsonb;
    hold record;
    locked ledger_operation;
    held ledger_operation;
    wake boolean := false;
BEGIN
    -- An API request let in by its process's token cache: the token checked first (nothing written if not).
    IF request ? 'token' THEN
        PERFORM ledger_token_unchanged(request->'token');
    END IF;
    INSERT INTO ledger_delivery
    SELECT r.* FROM jsonb_array_elements(request->'invalid') AS rows(row),
    LATERAL jsonb_populate_record(NULL::ledger_delivery, row || jsonb_build_object('id', nextval(delivery_ids))) r;

    SELECT array_agg(DISTINCT k) INTO keys FROM unnest(event_keys) AS ks(k);
    IF keys IS NULL THEN
        RETURN jsonb_build_object('wake', false, 'operations', '{}'::jsonb, 'results', '[]'::jsonb, 'audit', NULL);
    END IF;

    -- The keys taken before this request: duplicates and conflicts reserve nothing.
    operations := ledger_operations_of(workspace, keys);

    -- The database decides who reserves each new key (DESIGN.md rule 2): the rows the INSERT
    -- returns are the ones this request created; a key repeated in the request is reserved by its
    -- first event.
    IF (SELECT count(*) FROM jsonb_object_keys(operations)) < array_length(keys, 1) THEN
        -- Every column named (tests/ledger/intake/test_reserve_columns.py holds the lists to the models).
        WITH events AS (
            SELECT DISTINCT ON (e.key) e.*
            FROM unnest(event_actions, event_keys, event_definition_versions, event_fingerprints, event_payloads,
                        event_correlation_ids, event_states, event_deadlines, event_series, event_versions,
                        event_ordered) WITH ORDINALITY
                 AS e(action, key, definition_version, fingerprint, payload, correlation_id, state, deadline, series,
                      version, ordered, place)
            WHERE NOT operations ? e.key
            ORDER BY e.key, e.place
        ), inserted AS (
            INSERT INTO ledger_operation (
                id, action, key, key_recipe, definition_version, fingerprint, payload, correlation_id,
                submitted_by, state, attempts, next_attempt_at, deadline, lease_owner, lease_expires_at,
                fencing_token, last_error_category, last_error_message, result, external_id, created_at,
                updated_at, workspace_id, redacted_at, ordered, series, version, last_error_times,
                assigned_to_id, assigned_at, state_changed_at)
            SELECT
                nextval(operation_ids), e.action, e.key, shared_operation.key_recipe, e.definition_version,
                e.fingerprint, e.payload, e.correlation_id, shared_operation.submitted_by, e.state,
                shared_operation.attempts, shared_operation.next_attempt_at, e.deadline,
                shared_operation.lease_owner, shared_operation.lease_expires_at,
                shared_operation.fencing_token, shared_operation.last_error_category,
                shared_operation.last_error_message, shared_operation.result, shared_operation.external_id,
                shared_operation.created_at, shared_operation.updated_at, shared_operation.workspace_id,
                shared_operation.redacted_at, e.ordered, e.series, e.version,
                shared_operation.last_error_times, shared_operation.assigned_to_id,
                shared_operation.assigned_at, shared_operation.state_changed_at
            FROM events e
            ORDER BY e.place
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
        SELECT e.place, e.action, e.key, e.fingerprint, e.payload, e.correlation_id, e.sender_delivery_id, e.occurred,
               operations->e.key AS operation, nextval(delivery_ids) AS delivery_id,
               row_number() OVER (PARTITION BY e.key ORDER BY e.place) AS nth
        FROM unnest(event_actions, event_keys, event_fingerprints, event_payloads, event_correlation_ids,
                    event_sender_delivery_ids, event_occurred) WITH ORDINALITY
             AS e(action, key, fingerprint, payload, correlation_id, sender_delivery_id, occurred, place)
    ), decided AS (
        SELECT *, CASE WHEN nth = 1 AND (operation->>'id')::bigint = ANY(created) THEN 'accepted'
                       WHEN operation->>'fingerprint' = fingerprint THEN 'duplicate'
                       ELSE 'conflict' END AS outcome
        FROM events
    ), conflicts AS (
        SELECT place, request->'conflict' || jsonb_build_object(
                   'id', nextval(conflict_ids), 'operation_id', operation->'id', 'delivery_id', delivery_id,
                   'incoming_fingerprint', fingerprint, 'incoming_payload', payload,
                   'differences', differences) AS conflict,
               (SELECT string_agg(d->>'field', ', ') FROM jsonb_array_elements(differences) AS ds(d)) AS fields
        FROM decided,
        LATERAL (
            SELECT coalesce(jsonb_agg(jsonb_build_object(
                       'field', name, 'recorded', coalesce(operation->'payload'->name, 'null'),
                       'incoming', coalesce(payload->name, 'null')) ORDER BY n), '[]') AS differences
            FROM jsonb_array_elements_text(request->'fingerprint_fields'->action)
                 WITH ORDINALITY AS names(name, n)
            WHERE (operation->'payload'->name) IS DISTINCT FROM (payload->name)
        ) found
        WHERE outcome = 'conflict'
    ), written_deliveries AS (
        INSERT INTO ledger_delivery (
            id, delivery_id, correlation_id, occurred_at, source, submitted_by, action, key, outcome, errors,
            received_at, operation_id, workspace_id, person_id)
        SELECT delivery_id, sender_delivery_id, correlation_id, occurred, shared_delivery.source,
               shared_delivery.submitted_by, action, key, outcome, shared_delivery.errors, shared_delivery.received_at,
               (operation->>'id')::bigint, shared_delivery.workspace_id, shared_delivery.person_id
        FROM decided
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

    -- The audit chains last, as ledger.core.audit_chain.append takes them: the lanes the events go to
    -- locked in order until the commit, each one's head read after its lock, and the events given
    -- their lanes and ids (ledger_audit_head); the caller seals each lane's after its head.
    chain := ledger_audit_head(workspace, ARRAY(
        SELECT (a.event->>'operation_id')::bigint FROM unnest(audits) WITH ORDINALITY AS a(event, n) ORDER BY a.n), false);
    FOR place IN 1 .. array_length(audits, 1) LOOP
        audits[place] := audits[place]
                         || jsonb_build_object('id', chain->'ids'->(place - 1), 'lane', chain->'lanes'->(place - 1));
    END LOOP;

    -- The wake-up (ledger.nudges.request_processing): a pending one is kept, KEY SHARE-locked until
    -- this commits (the task that takes it waits, then claims what this wrote); else this one is it.
    IF accepted > 0 THEN
        wake := ledger_take_wakeup((request->>'now')::timestamptz);
    END IF;

    RETURN jsonb_build_object('wake', wake, 'operations', operations, 'results', results,
                              'audit', jsonb_build_array(chain->'heads', to_jsonb(audits)));
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
    chain jsonb;
    audits jsonb;
    wake boolean := false;
BEGIN
    -- An API request let in by its process's token cache: the token checked first (nothing written if not).
    IF request ? 'token' THEN
        PERFORM ledger_token_unchanged(request->'token');
    END IF;
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

    -- The audit chain, as in ledger_reserve: the operation's lane locked until the commit, then its
    -- head read in a statement of its own (it sees what the lock's previous holder committed); the
    -- events get their lane and ids here and are sealed and inserted by the caller.
    chain := ledger_audit_head(workspace, CASE WHEN held.id IS NULL THEN ARRAY[operation.id]
                                               ELSE ARRAY[operation.id, operation.id] END,
                               coalesce((request->>'every_lane')::boolean, false));
    audits := jsonb_build_array(request->'audit' || jsonb_build_object(
        'operation_id', operation.id,
        'kind', CASE outcome WHEN 'accepted' THEN 'reserved' WHEN 'duplicate' THEN 'duplicate_delivery'
                             ELSE 'conflict_detected' END,
        'to_state', CASE WHEN created THEN operation.state ELSE '' END,
        'message', left(message, 500),
        'id', chain->'ids'->0, 'lane', chain->'lanes'->0));
    IF held.id IS NOT NULL THEN
        audits := audits || jsonb_build_array(request->'audit' || jsonb_build_object(
            'operation_id', operation.id, 'kind', 'conflict_held', 'from_state', locked.state,
            'to_state', 'needs_review', 'error_category', 'conflict', 'message', operation.last_error_message,
            'id', chain->'ids'->1, 'lane', chain->'lanes'->1));
    END IF;

    IF created THEN
        wake := ledger_take_wakeup((request->>'now')::timestamptz);
    END IF;

    RETURN jsonb_build_object(
        'wake', wake, 'operations', jsonb_build_object(operation.key, to_jsonb(operation)),
        'results', jsonb_build_array(jsonb_build_object('outcome', outcome, 'key', operation.key, 'conflict', conflict)),
        'audit', jsonb_build_array(chain->'heads', audits));
END
$function$
"""

CLAIM = r"""
CREATE OR REPLACE FUNCTION public.ledger_claim(request jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    workspace bigint := (request->>'workspace_id')::bigint;
    at timestamptz := (request->>'now')::timestamptz;
    wanted text := request->>'key';
    reserve jsonb := request->'reserve';
    reserved jsonb;
    operation ledger_operation;
    claimed ledger_operation;
    decided boolean := false;
    switch jsonb;
    held timestamptz;
    answer text;
    attempt jsonb;
    heads jsonb := '{}';
    chain jsonb;
    audits jsonb := '[]';
BEGIN
    IF request ? 'token' THEN
        PERFORM ledger_token_unchanged(request->'token');
    END IF;
    -- The row first when it is there (rows before the chain): a claimer that finds it waits here.
    SELECT * INTO operation FROM ledger_operation WHERE workspace_id = workspace AND key = wanted
    FOR NO KEY UPDATE;
    IF reserve <> 'null' THEN
        IF operation.id IS NULL THEN
            -- Not recorded yet: the claim decided on the row the reservation would create, which
            -- it then creates claimed (ledger.states' edge to processing, in its insert) when it may.
            operation := jsonb_populate_record(NULL::ledger_operation, reserve->'operation' || (reserve->'events'->0->'operation'));
            SELECT d.answer, d.held, d.switch INTO answer, held, switch FROM ledger_claim_answer(operation, request) d;
            decided := true;
            IF answer = 'claimed' THEN
                reserve := jsonb_set(reserve, '{events,0,operation}', reserve->'events'->0->'operation' || jsonb_build_object(
                    'state', 'processing', 'updated_at', at, 'state_changed_at', at, 'lease_owner', request->>'actor',
                    'lease_expires_at', at + make_interval(secs => (request->>'lease_seconds')::double precision),
                    'deadline', held, 'attempts', operation.attempts + 1, 'fencing_token', operation.fencing_token + 1));
            END IF;
        END IF;
        reserved := ledger_reserve_one(reserve);
        heads := reserved->'audit'->0;
        audits := reserved->'audit'->1;
        IF reserved->'results'->0->>'outcome' = 'accepted' THEN
            -- Created by this reservation (no one else sees it yet), as decided above.
            IF answer = 'claimed' THEN
                claimed := jsonb_populate_record(NULL::ledger_operation, reserved->'operations'->wanted);
                operation.id := claimed.id;
                -- It arrived in its first state (the claim's event says it moved from there).
                audits := jsonb_set(audits, '{0,to_state}', to_jsonb(operation.state));
            ELSE
                operation := jsonb_populate_record(NULL::ledger_operation, reserved->'operations'->wanted);
            END IF;
        ELSIF operation.id IS NULL AND reserved->'results'->0->>'outcome' <> 'conflict' THEN
            -- Created by another since the read above (committed: the reservation waited for it):
            -- decided as it is.
            SELECT * INTO operation FROM ledger_operation WHERE workspace_id = workspace AND key = wanted
            FOR NO KEY UPDATE;
            decided := false;
        END IF;
    ELSIF operation.id IS NULL OR operation.action <> request->>'action' THEN
        RETURN jsonb_build_object('answer', 'not_found');
    END IF;

    -- The configuration a try would begin under, stored when a request first names it (content
    -- addressed: a row that is there is found, nothing written), whatever this claim is answered, a
    -- payload conflict too: the request's later claims of the action are sent it no more.
    IF request->'config' <> 'null' THEN
        INSERT INTO ledger_configversion
        SELECT r.* FROM jsonb_populate_record(NULL::ledger_configversion, request->'config') r
        ON CONFLICT DO NOTHING;
    END IF;
    IF reserved->'results'->0->>'outcome' = 'conflict' THEN
        RETURN jsonb_build_object('answer', 'blocked', 'reserved', reserved, 'audit', jsonb_build_array(heads, audits));
    END IF;
    IF NOT decided THEN
        SELECT d.answer, d.held, d.switch INTO answer, held, switch FROM ledger_claim_answer(operation, request) d;
    END IF;

    IF answer = 'claimed' AND claimed.id IS NULL THEN
        -- The move of ledger.states' edge to processing, guarded by the state and token as held;
        -- the time a pause held it given to its deadline now.
        UPDATE ledger_operation o
        SET state = 'processing', updated_at = at, state_changed_at = at, lease_owner = request->>'actor',
            lease_expires_at = at + make_interval(secs => (request->>'lease_seconds')::double precision),
            deadline = held, attempts = o.attempts + 1, fencing_token = o.fencing_token + 1
        WHERE o.id = operation.id AND o.state IN ('pending', 'retrying') AND o.state = operation.state
          AND o.fencing_token = operation.fencing_token
        RETURNING * INTO claimed;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'ledger_claim: the held row % changed under its guard', operation.id;
        END IF;
    END IF;
    IF answer = 'claimed' THEN
        attempt := request->'attempt' || jsonb_build_object(
            'id', nextval('ledger_attempt_id_seq'), 'operation_id', claimed.id, 'number', claimed.fencing_token,
            'fencing_token', claimed.fencing_token, 'idempotency_key', claimed.key);
        INSERT INTO ledger_attempt SELECT r.* FROM jsonb_populate_record(NULL::ledger_attempt, attempt) r;
        -- The chain, last: the operation's lane, its head under its lock (a reservation above took
        -- it already: taken again, its head is the same, as nothing is inserted before the commit).
        chain := ledger_audit_head(workspace, ARRAY[claimed.id], coalesce((request->>'every_lane')::boolean, false));
        heads := heads || (chain->'heads');
        audits := audits || jsonb_build_array(request->'audit' || jsonb_build_object(
            'operation_id', claimed.id, 'kind', 'claimed', 'from_state', operation.state, 'to_state', 'processing',
            'message', 'claim ' || claimed.fencing_token || ': the caller performs it',
            'attempt_id', attempt->'id', 'id', chain->'ids'->0, 'lane', chain->'lanes'->0));
    END IF;
    IF answer <> 'overdue' THEN
        -- Counted as ledger.core.tallies.count counts it, on this process's own row.
        INSERT INTO ledger_tally (name, labels, shard, value)
        VALUES ('claims', request->'tally_labels'->>(CASE answer WHEN 'decided' THEN operation.state ELSE answer END),
                request->>'shard', 1)
        ON CONFLICT (name, labels, shard) DO UPDATE SET value = ledger_tally.value + excluded.value;
    END IF;

    RETURN jsonb_build_object(
        'answer', answer, 'reserved', reserved, 'operation', CASE WHEN claimed.id IS NOT NULL THEN to_jsonb(claimed) ELSE to_jsonb(operation) END,
        'from_state', operation.state, 'attempt', attempt,
        'switch', switch,
        'audit', CASE WHEN jsonb_array_length(audits) > 0 THEN jsonb_build_array(heads, audits) END);
END
$function$
"""

REPORT_OUTCOME = r"""
CREATE OR REPLACE FUNCTION public.ledger_report_outcome(request jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    at timestamptz := (request->>'now')::timestamptz;
    claim bigint := (request->>'claim')::bigint;
    keyed ledger_operation;
    operation ledger_operation;
    moved ledger_operation;
    attempt ledger_attempt;
    seconds double precision;
    head jsonb;
BEGIN
    IF request ? 'token' THEN
        PERFORM ledger_token_unchanged(request->'token');
    END IF;
    SELECT * INTO keyed FROM ledger_operation o
    WHERE o.workspace_id = (request->>'workspace_id')::bigint AND o.key = request->>'key';
    IF keyed.id IS NULL THEN
        RETURN jsonb_build_object('answer', 'not_found');
    ELSIF keyed.action <> request->>'action' THEN
        RETURN jsonb_build_object('answer', 'other_action');
    END IF;
    -- Lock order (docs/architecture.md): the claim's Attempt, then the row, the tallies, the chain.
    IF keyed.id = (request->>'operation_id')::bigint THEN
        SELECT * INTO attempt FROM ledger_attempt a WHERE a.operation_id = keyed.id AND a.fencing_token = claim
        FOR UPDATE;
    END IF;
    SELECT * INTO operation FROM ledger_operation o WHERE o.id = keyed.id FOR NO KEY UPDATE;
    IF operation.id IS NULL THEN  -- purged since it was found
        RETURN jsonb_build_object('answer', 'not_found');
    END IF;
    IF attempt.id IS NOT NULL AND attempt.report <> '' THEN
        RETURN jsonb_build_object(
            'answer', CASE WHEN attempt.report = request->>'digest' THEN 'repeated' ELSE 'conflict' END,
            'operation', to_jsonb(operation), 'attempt', to_jsonb(attempt));
    END IF;
    IF keyed.id IS DISTINCT FROM (request->>'operation_id')::bigint THEN
        RETURN jsonb_build_object('answer', 'never_issued', 'operation', to_jsonb(operation));
    ELSIF claim <> operation.fencing_token OR operation.state <> 'processing' THEN
        RETURN jsonb_build_object('answer', 'stale', 'operation', to_jsonb(operation));
    ELSIF operation.lease_expires_at IS NULL OR operation.lease_expires_at <= at THEN
        RETURN jsonb_build_object('answer', 'overdue', 'operation', to_jsonb(operation));
    END IF;
    IF attempt.id IS NULL THEN
        RAISE EXCEPTION 'ledger_report_outcome: claim % of operation % has no attempt', claim, operation.id;
    END IF;

    UPDATE ledger_attempt a
    SET report = request->>'digest', external_id = request->>'external_id', finished_at = at, outcome = 'ok'
    WHERE a.id = attempt.id;
    -- The move of ledger.states' edge to succeeded, guarded by the state and the claim's token as held.
    UPDATE ledger_operation o
    SET state = 'succeeded', updated_at = at, state_changed_at = at, result = request->'result',
        external_id = request->>'external_id', lease_owner = '', lease_expires_at = NULL, next_attempt_at = NULL,
        last_error_category = '', last_error_message = ''
    WHERE o.id = operation.id AND o.state IN ('processing') AND o.fencing_token = claim
    RETURNING * INTO moved;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'ledger_report_outcome: the held row % changed under its guard', operation.id;
    END IF;

    -- Counted as ledger.core.tallies.count_moves counts a try's success and a final state, on this
    -- process's own rows, in the order of their names and labels.
    seconds := greatest(extract(epoch FROM at - operation.created_at)::double precision, 0);
    INSERT INTO ledger_tally (name, labels, shard, value)
    SELECT t.name, t.labels, request->>'shard', t.value
    FROM (VALUES
            ('attempts', request->'tally'->>'attempts', 1::double precision),
            ('finished', request->'tally'->>'action', 1),
            ('finished_seconds', request->'tally'->>'action', seconds),
            ('finished_bucket', coalesce(
                (SELECT b->>1 FROM jsonb_array_elements(request->'tally'->'buckets') WITH ORDINALITY AS l(b, n)
                 WHERE seconds <= (b->>0)::double precision ORDER BY n LIMIT 1),
                request->'tally'->>'beyond'), 1),
            ('late', CASE WHEN seconds > (request->'tally'->>'service_level')::double precision
                          THEN request->'tally'->>'action' END, 1)) AS t(name, labels, value)
    WHERE t.labels IS NOT NULL
    ORDER BY t.name COLLATE "C", t.labels COLLATE "C"
    ON CONFLICT (name, labels, shard) DO UPDATE SET value = ledger_tally.value + excluded.value;

    -- The chain, last: the operation's lane, its head under its lock, and the move's one event.
    head := ledger_audit_head(operation.workspace_id, ARRAY[moved.id], false);
    RETURN jsonb_build_object(
        'answer', 'recorded', 'operation', to_jsonb(moved), 'attempt', to_jsonb(attempt),
        'audit', jsonb_build_array(head->'heads', jsonb_build_array(request->'audit' || jsonb_build_object(
            'operation_id', moved.id, 'kind', 'succeeded', 'from_state', operation.state, 'to_state', 'succeeded',
            'attempt_id', attempt.id, 'id', head->'ids'->0, 'lane', head->'lanes'->0))));
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
    workspace jsonb;
    events jsonb;
    operation_ids bigint[];
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
    -- in a committed state), the claim's token in its message, on each workspace's chains in turn
    -- (the workspaces sorted, and each one's lanes by ledger_audit_head, as
    -- ledger.core.audit_chain.append takes them, so no two appenders deadlock): each lane locked and
    -- its head read, the events given their lanes and ids in order.
    FOR workspace IN SELECT w FROM jsonb_array_elements(request->'workspaces') AS workspaces(w) LOOP
        SELECT jsonb_agg(request->'audit' || jsonb_build_object(
                   'workspace_id', h.row->'operation'->'workspace_id', 'operation_id', h.row->'operation'->'id',
                   'kind', 'succeeded', 'from_state', h.row->'operation'->'from_state', 'to_state', 'succeeded',
                   'message', 'claim ' || (h.row->'attempt'->>'fencing_token') || ', finished in it',
                   'attempt_id', h.row->'attempt'->'id') ORDER BY n),
               array_agg((h.row->'operation'->>'id')::bigint ORDER BY n)
        INTO events, operation_ids
        FROM jsonb_array_elements(held) WITH ORDINALITY AS h(row, n)
        WHERE h.row->'operation'->'workspace_id' = workspace;
        head := ledger_audit_head((workspace #>> '{}')::bigint, operation_ids, false);
        SELECT jsonb_agg(e.event || jsonb_build_object('id', head->'ids'->((e.n - 1)::int),
                                                       'lane', head->'lanes'->((e.n - 1)::int)) ORDER BY e.n)
        INTO events
        FROM jsonb_array_elements(events) WITH ORDINALITY AS e(event, n);
        chains := chains || jsonb_build_array(jsonb_build_array(head->'heads', events));
    END LOOP;

    RETURN jsonb_build_object('changed', changed, 'chains', chains);
END
$function$
"""

CHAIN_HEAD_BEFORE = r"""
CREATE OR REPLACE FUNCTION public.ledger_chain_head(chain bigint)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    recent timestamptz := date_trunc('month', now(), 'UTC') - interval '1 month';
    head record;
BEGIN
    IF chain IS NULL THEN
        SELECT hash, created_at INTO head FROM ledger_auditevent
        WHERE workspace_id IS NULL AND hash <> '' AND created_at >= recent ORDER BY id DESC LIMIT 1;
        IF NOT FOUND THEN
            SELECT hash, created_at INTO head FROM ledger_auditevent
            WHERE workspace_id IS NULL AND hash <> '' ORDER BY id DESC LIMIT 1;
        END IF;
    ELSE
        SELECT hash, created_at INTO head FROM ledger_auditevent
        WHERE workspace_id = chain AND hash <> '' AND created_at >= recent ORDER BY id DESC LIMIT 1;
        IF NOT FOUND THEN
            SELECT hash, created_at INTO head FROM ledger_auditevent
            WHERE workspace_id = chain AND hash <> '' ORDER BY id DESC LIMIT 1;
        END IF;
    END IF;
    RETURN jsonb_build_array(coalesce(head.hash, ''), head.created_at);
END
$function$
"""

AUDIT_HEAD_BEFORE = r"""
CREATE OR REPLACE FUNCTION public.ledger_audit_head(lock_key bigint, chain bigint, count integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    head jsonb;
    ids jsonb := '[]';
BEGIN
    PERFORM pg_advisory_xact_lock(lock_key);
    head := ledger_chain_head(chain);
    FOR n IN 1 .. count LOOP
        ids := ids || to_jsonb(nextval('ledger_auditevent_id_seq'));
    END LOOP;
    RETURN jsonb_build_array(head, ids);
END
$function$
"""

RESERVE_BEFORE = r"""
CREATE OR REPLACE FUNCTION public.ledger_reserve(request jsonb, event_actions text[], event_keys text[], event_definition_versions text[], event_fingerprints text[], event_payloads jsonb[], event_correlation_ids text[], event_states text[], event_deadlines timestamp with time zone[], event_series text[], event_versions integer[], event_ordered text[], event_sender_delivery_ids text[], event_occurred timestamp with time zone[])
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
    -- The columns every row of a table shares, read once (what an event varies comes in the arrays).
    shared_operation ledger_operation := jsonb_populate_record(NULL::ledger_operation, request->'operation');
    shared_delivery ledger_delivery := jsonb_populate_record(NULL::ledger_delivery, request->'delivery');
    operations jsonb;
    created bigint[] := '{}';
    taken text[];
    audits jsonb[];
    results jsonb;
    accepted int;
    previous jsonb;
    hold record;
    locked ledger_operation;
    held ledger_operation;
    wake boolean := false;
BEGIN
    -- An API request let in by its process's token cache: the token checked first (nothing written if not).
    IF request ? 'token' THEN
        PERFORM ledger_token_unchanged(request->'token');
    END IF;
    INSERT INTO ledger_delivery
    SELECT r.* FROM jsonb_array_elements(request->'invalid') AS rows(row),
    LATERAL jsonb_populate_record(NULL::ledger_delivery, row || jsonb_build_object('id', nextval(delivery_ids))) r;

    SELECT array_agg(DISTINCT k) INTO keys FROM unnest(event_keys) AS ks(k);
    IF keys IS NULL THEN
        RETURN jsonb_build_object('wake', false, 'operations', '{}'::jsonb, 'results', '[]'::jsonb, 'audit', NULL);
    END IF;

    -- The keys taken before this request: duplicates and conflicts reserve nothing.
    operations := ledger_operations_of(workspace, keys);

    -- The database decides who reserves each new key (DESIGN.md rule 2): the rows the INSERT
    -- returns are the ones this request created; a key repeated in the request is reserved by its
    -- first event.
    IF (SELECT count(*) FROM jsonb_object_keys(operations)) < array_length(keys, 1) THEN
        -- Every column named (tests/ledger/intake/test_reserve_columns.py holds the lists to the models).
        WITH events AS (
            SELECT DISTINCT ON (e.key) e.*
            FROM unnest(event_actions, event_keys, event_definition_versions, event_fingerprints, event_payloads,
                        event_correlation_ids, event_states, event_deadlines, event_series, event_versions,
                        event_ordered) WITH ORDINALITY
                 AS e(action, key, definition_version, fingerprint, payload, correlation_id, state, deadline, series,
                      version, ordered, place)
            WHERE NOT operations ? e.key
            ORDER BY e.key, e.place
        ), inserted AS (
            INSERT INTO ledger_operation (
                id, action, key, key_recipe, definition_version, fingerprint, payload, correlation_id,
                submitted_by, state, attempts, next_attempt_at, deadline, lease_owner, lease_expires_at,
                fencing_token, last_error_category, last_error_message, result, external_id, created_at,
                updated_at, workspace_id, redacted_at, ordered, series, version, last_error_times,
                assigned_to_id, assigned_at, state_changed_at)
            SELECT
                nextval(operation_ids), e.action, e.key, shared_operation.key_recipe, e.definition_version,
                e.fingerprint, e.payload, e.correlation_id, shared_operation.submitted_by, e.state,
                shared_operation.attempts, shared_operation.next_attempt_at, e.deadline,
                shared_operation.lease_owner, shared_operation.lease_expires_at,
                shared_operation.fencing_token, shared_operation.last_error_category,
                shared_operation.last_error_message, shared_operation.result, shared_operation.external_id,
                shared_operation.created_at, shared_operation.updated_at, shared_operation.workspace_id,
                shared_operation.redacted_at, e.ordered, e.series, e.version,
                shared_operation.last_error_times, shared_operation.assigned_to_id,
                shared_operation.assigned_at, shared_operation.state_changed_at
            FROM events e
            ORDER BY e.place
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
        SELECT e.place, e.action, e.key, e.fingerprint, e.payload, e.correlation_id, e.sender_delivery_id, e.occurred,
               operations->e.key AS operation, nextval(delivery_ids) AS delivery_id,
               row_number() OVER (PARTITION BY e.key ORDER BY e.place) AS nth
        FROM unnest(event_actions, event_keys, event_fingerprints, event_payloads, event_correlation_ids,
                    event_sender_delivery_ids, event_occurred) WITH ORDINALITY
             AS e(action, key, fingerprint, payload, correlation_id, sender_delivery_id, occurred, place)
    ), decided AS (
        SELECT *, CASE WHEN nth = 1 AND (operation->>'id')::bigint = ANY(created) THEN 'accepted'
                       WHEN operation->>'fingerprint' = fingerprint THEN 'duplicate'
                       ELSE 'conflict' END AS outcome
        FROM events
    ), conflicts AS (
        SELECT place, request->'conflict' || jsonb_build_object(
                   'id', nextval(conflict_ids), 'operation_id', operation->'id', 'delivery_id', delivery_id,
                   'incoming_fingerprint', fingerprint, 'incoming_payload', payload,
                   'differences', differences) AS conflict,
               (SELECT string_agg(d->>'field', ', ') FROM jsonb_array_elements(differences) AS ds(d)) AS fields
        FROM decided,
        LATERAL (
            SELECT coalesce(jsonb_agg(jsonb_build_object(
                       'field', name, 'recorded', coalesce(operation->'payload'->name, 'null'),
                       'incoming', coalesce(payload->name, 'null')) ORDER BY n), '[]') AS differences
            FROM jsonb_array_elements_text(request->'fingerprint_fields'->action)
                 WITH ORDINALITY AS names(name, n)
            WHERE (operation->'payload'->name) IS DISTINCT FROM (payload->name)
        ) found
        WHERE outcome = 'conflict'
    ), written_deliveries AS (
        INSERT INTO ledger_delivery (
            id, delivery_id, correlation_id, occurred_at, source, submitted_by, action, key, outcome, errors,
            received_at, operation_id, workspace_id, person_id)
        SELECT delivery_id, sender_delivery_id, correlation_id, occurred, shared_delivery.source,
               shared_delivery.submitted_by, action, key, outcome, shared_delivery.errors, shared_delivery.received_at,
               (operation->>'id')::bigint, shared_delivery.workspace_id, shared_delivery.person_id
        FROM decided
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
    previous := ledger_chain_head(workspace);
    FOR place IN 1 .. array_length(audits, 1) LOOP
        audits[place] := audits[place] || jsonb_build_object('id', nextval(audit_ids));
    END LOOP;

    -- The wake-up (ledger.nudges.request_processing): a pending one is kept, KEY SHARE-locked until
    -- this commits (the task that takes it waits, then claims what this wrote); else this one is it.
    IF accepted > 0 THEN
        wake := ledger_take_wakeup((request->>'now')::timestamptz);
    END IF;

    RETURN jsonb_build_object('wake', wake, 'operations', operations, 'results', results,
                              'audit', jsonb_build_array(previous, to_jsonb(audits)));
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
    previous jsonb;
    audits jsonb;
    wake boolean := false;
BEGIN
    -- An API request let in by its process's token cache: the token checked first (nothing written if not).
    IF request ? 'token' THEN
        PERFORM ledger_token_unchanged(request->'token');
    END IF;
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
    previous := ledger_chain_head(workspace);
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
        'audit', jsonb_build_array(previous, audits));
END
$function$
"""

CLAIM_BEFORE = r"""
CREATE OR REPLACE FUNCTION public.ledger_claim(request jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    workspace bigint := (request->>'workspace_id')::bigint;
    at timestamptz := (request->>'now')::timestamptz;
    wanted text := request->>'key';
    reserve jsonb := request->'reserve';
    reserved jsonb;
    operation ledger_operation;
    claimed ledger_operation;
    decided boolean := false;
    switch jsonb;
    held timestamptz;
    answer text;
    attempt jsonb;
    previous jsonb := '["", null]';
    audits jsonb := '[]';
BEGIN
    IF request ? 'token' THEN
        PERFORM ledger_token_unchanged(request->'token');
    END IF;
    -- The row first when it is there (rows before the chain): a claimer that finds it waits here.
    SELECT * INTO operation FROM ledger_operation WHERE workspace_id = workspace AND key = wanted
    FOR NO KEY UPDATE;
    IF reserve <> 'null' THEN
        IF operation.id IS NULL THEN
            -- Not recorded yet: the claim decided on the row the reservation would create, which
            -- it then creates claimed (ledger.states' edge to processing, in its insert) when it may.
            operation := jsonb_populate_record(NULL::ledger_operation, reserve->'operation' || (reserve->'events'->0->'operation'));
            SELECT d.answer, d.held, d.switch INTO answer, held, switch FROM ledger_claim_answer(operation, request) d;
            decided := true;
            IF answer = 'claimed' THEN
                reserve := jsonb_set(reserve, '{events,0,operation}', reserve->'events'->0->'operation' || jsonb_build_object(
                    'state', 'processing', 'updated_at', at, 'state_changed_at', at, 'lease_owner', request->>'actor',
                    'lease_expires_at', at + make_interval(secs => (request->>'lease_seconds')::double precision),
                    'deadline', held, 'attempts', operation.attempts + 1, 'fencing_token', operation.fencing_token + 1));
            END IF;
        END IF;
        reserved := ledger_reserve_one(reserve);
        previous := reserved->'audit'->0;
        audits := reserved->'audit'->1;
        IF reserved->'results'->0->>'outcome' = 'accepted' THEN
            -- Created by this reservation (no one else sees it yet), as decided above.
            IF answer = 'claimed' THEN
                claimed := jsonb_populate_record(NULL::ledger_operation, reserved->'operations'->wanted);
                operation.id := claimed.id;
                -- It arrived in its first state (the claim's event says it moved from there).
                audits := jsonb_set(audits, '{0,to_state}', to_jsonb(operation.state));
            ELSE
                operation := jsonb_populate_record(NULL::ledger_operation, reserved->'operations'->wanted);
            END IF;
        ELSIF operation.id IS NULL AND reserved->'results'->0->>'outcome' <> 'conflict' THEN
            -- Created by another since the read above (committed: the reservation waited for it):
            -- decided as it is.
            SELECT * INTO operation FROM ledger_operation WHERE workspace_id = workspace AND key = wanted
            FOR NO KEY UPDATE;
            decided := false;
        END IF;
    ELSIF operation.id IS NULL OR operation.action <> request->>'action' THEN
        RETURN jsonb_build_object('answer', 'not_found');
    END IF;

    -- The configuration a try would begin under, stored when a request first names it (content
    -- addressed: a row that is there is found, nothing written), whatever this claim is answered, a
    -- payload conflict too: the request's later claims of the action are sent it no more.
    IF request->'config' <> 'null' THEN
        INSERT INTO ledger_configversion
        SELECT r.* FROM jsonb_populate_record(NULL::ledger_configversion, request->'config') r
        ON CONFLICT DO NOTHING;
    END IF;
    IF reserved->'results'->0->>'outcome' = 'conflict' THEN
        RETURN jsonb_build_object('answer', 'blocked', 'reserved', reserved, 'audit', jsonb_build_array(previous, audits));
    END IF;
    IF NOT decided THEN
        SELECT d.answer, d.held, d.switch INTO answer, held, switch FROM ledger_claim_answer(operation, request) d;
    END IF;

    IF answer = 'claimed' AND claimed.id IS NULL THEN
        -- The move of ledger.states' edge to processing, guarded by the state and token as held;
        -- the time a pause held it given to its deadline now.
        UPDATE ledger_operation o
        SET state = 'processing', updated_at = at, state_changed_at = at, lease_owner = request->>'actor',
            lease_expires_at = at + make_interval(secs => (request->>'lease_seconds')::double precision),
            deadline = held, attempts = o.attempts + 1, fencing_token = o.fencing_token + 1
        WHERE o.id = operation.id AND o.state IN ('pending', 'retrying') AND o.state = operation.state
          AND o.fencing_token = operation.fencing_token
        RETURNING * INTO claimed;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'ledger_claim: the held row % changed under its guard', operation.id;
        END IF;
    END IF;
    IF answer = 'claimed' THEN
        attempt := request->'attempt' || jsonb_build_object(
            'id', nextval('ledger_attempt_id_seq'), 'operation_id', claimed.id, 'number', claimed.fencing_token,
            'fencing_token', claimed.fencing_token, 'idempotency_key', claimed.key);
        INSERT INTO ledger_attempt SELECT r.* FROM jsonb_populate_record(NULL::ledger_attempt, attempt) r;
        IF request->'reserve' = 'null' THEN
            -- The chain, last (ledger_reserve_one took it for a reservation): its head under its lock.
            PERFORM pg_advisory_xact_lock((request->>'chain_lock')::bigint);
            previous := ledger_chain_head(workspace);
        END IF;
        audits := audits || jsonb_build_array(request->'audit' || jsonb_build_object(
            'operation_id', claimed.id, 'kind', 'claimed', 'from_state', operation.state, 'to_state', 'processing',
            'message', 'claim ' || claimed.fencing_token || ': the caller performs it',
            'attempt_id', attempt->'id', 'id', nextval('ledger_auditevent_id_seq')));
    END IF;
    IF answer <> 'overdue' THEN
        -- Counted as ledger.core.tallies.count counts it, on this process's own row.
        INSERT INTO ledger_tally (name, labels, shard, value)
        VALUES ('claims', request->'tally_labels'->>(CASE answer WHEN 'decided' THEN operation.state ELSE answer END),
                request->>'shard', 1)
        ON CONFLICT (name, labels, shard) DO UPDATE SET value = ledger_tally.value + excluded.value;
    END IF;

    RETURN jsonb_build_object(
        'answer', answer, 'reserved', reserved, 'operation', CASE WHEN claimed.id IS NOT NULL THEN to_jsonb(claimed) ELSE to_jsonb(operation) END,
        'from_state', operation.state, 'attempt', attempt,
        'switch', switch,
        'audit', CASE WHEN jsonb_array_length(audits) > 0 THEN jsonb_build_array(previous, audits) END);
END
$function$
"""

REPORT_OUTCOME_BEFORE = r"""
CREATE OR REPLACE FUNCTION public.ledger_report_outcome(request jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    at timestamptz := (request->>'now')::timestamptz;
    claim bigint := (request->>'claim')::bigint;
    keyed ledger_operation;
    operation ledger_operation;
    moved ledger_operation;
    attempt ledger_attempt;
    seconds double precision;
    head jsonb;
BEGIN
    IF request ? 'token' THEN
        PERFORM ledger_token_unchanged(request->'token');
    END IF;
    SELECT * INTO keyed FROM ledger_operation o
    WHERE o.workspace_id = (request->>'workspace_id')::bigint AND o.key = request->>'key';
    IF keyed.id IS NULL THEN
        RETURN jsonb_build_object('answer', 'not_found');
    ELSIF keyed.action <> request->>'action' THEN
        RETURN jsonb_build_object('answer', 'other_action');
    END IF;
    -- Lock order (docs/architecture.md): the claim's Attempt, then the row, the tallies, the chain.
    IF keyed.id = (request->>'operation_id')::bigint THEN
        SELECT * INTO attempt FROM ledger_attempt a WHERE a.operation_id = keyed.id AND a.fencing_token = claim
        FOR UPDATE;
    END IF;
    SELECT * INTO operation FROM ledger_operation o WHERE o.id = keyed.id FOR NO KEY UPDATE;
    IF operation.id IS NULL THEN  -- purged since it was found
        RETURN jsonb_build_object('answer', 'not_found');
    END IF;
    IF attempt.id IS NOT NULL AND attempt.report <> '' THEN
        RETURN jsonb_build_object(
            'answer', CASE WHEN attempt.report = request->>'digest' THEN 'repeated' ELSE 'conflict' END,
            'operation', to_jsonb(operation), 'attempt', to_jsonb(attempt));
    END IF;
    IF keyed.id IS DISTINCT FROM (request->>'operation_id')::bigint THEN
        RETURN jsonb_build_object('answer', 'never_issued', 'operation', to_jsonb(operation));
    ELSIF claim <> operation.fencing_token OR operation.state <> 'processing' THEN
        RETURN jsonb_build_object('answer', 'stale', 'operation', to_jsonb(operation));
    ELSIF operation.lease_expires_at IS NULL OR operation.lease_expires_at <= at THEN
        RETURN jsonb_build_object('answer', 'overdue', 'operation', to_jsonb(operation));
    END IF;
    IF attempt.id IS NULL THEN
        RAISE EXCEPTION 'ledger_report_outcome: claim % of operation % has no attempt', claim, operation.id;
    END IF;

    UPDATE ledger_attempt a
    SET report = request->>'digest', external_id = request->>'external_id', finished_at = at, outcome = 'ok'
    WHERE a.id = attempt.id;
    -- The move of ledger.states' edge to succeeded, guarded by the state and the claim's token as held.
    UPDATE ledger_operation o
    SET state = 'succeeded', updated_at = at, state_changed_at = at, result = request->'result',
        external_id = request->>'external_id', lease_owner = '', lease_expires_at = NULL, next_attempt_at = NULL,
        last_error_category = '', last_error_message = ''
    WHERE o.id = operation.id AND o.state IN ('processing') AND o.fencing_token = claim
    RETURNING * INTO moved;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'ledger_report_outcome: the held row % changed under its guard', operation.id;
    END IF;

    -- Counted as ledger.core.tallies.count_moves counts a try's success and a final state, on this
    -- process's own rows, in the order of their names and labels.
    seconds := greatest(extract(epoch FROM at - operation.created_at)::double precision, 0);
    INSERT INTO ledger_tally (name, labels, shard, value)
    SELECT t.name, t.labels, request->>'shard', t.value
    FROM (VALUES
            ('attempts', request->'tally'->>'attempts', 1::double precision),
            ('finished', request->'tally'->>'action', 1),
            ('finished_seconds', request->'tally'->>'action', seconds),
            ('finished_bucket', coalesce(
                (SELECT b->>1 FROM jsonb_array_elements(request->'tally'->'buckets') WITH ORDINALITY AS l(b, n)
                 WHERE seconds <= (b->>0)::double precision ORDER BY n LIMIT 1),
                request->'tally'->>'beyond'), 1),
            ('late', CASE WHEN seconds > (request->'tally'->>'service_level')::double precision
                          THEN request->'tally'->>'action' END, 1)) AS t(name, labels, value)
    WHERE t.labels IS NOT NULL
    ORDER BY t.name COLLATE "C", t.labels COLLATE "C"
    ON CONFLICT (name, labels, shard) DO UPDATE SET value = ledger_tally.value + excluded.value;

    -- The chain, last: its head under its lock, and the move's one event.
    head := ledger_audit_head((request->>'chain_lock')::bigint, operation.workspace_id, 1);
    RETURN jsonb_build_object(
        'answer', 'recorded', 'operation', to_jsonb(moved), 'attempt', to_jsonb(attempt),
        'audit', jsonb_build_array(head->0, jsonb_build_array(request->'audit' || jsonb_build_object(
            'operation_id', moved.id, 'kind', 'succeeded', 'from_state', operation.state, 'to_state', 'succeeded',
            'attempt_id', attempt.id, 'id', head->1->0))));
END
$function$
"""

FINISH_CLAIMED_BEFORE = r"""
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

AUDIT_PARTITIONS = r"""
CREATE OR REPLACE FUNCTION public.ledger_audit_partitions(first timestamp with time zone, months integer)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    starts timestamptz;
    name text;
    created jsonb := '[]';
    held_back jsonb := '[]';
BEGIN
    IF months IS NULL OR months < 1 OR months > 240 THEN
        RAISE EXCEPTION 'ledger_audit_partitions: months must be 1 to 240, not %', months;
    END IF;
    -- One creator at a time: two sweeps would both find a month missing.
    PERFORM pg_advisory_xact_lock(x'41554450'::bigint << 32);
    FOR step IN 0 .. months - 1 LOOP
        starts := date_trunc('month', first, 'UTC') + make_interval(months => step);
        name := 'ledger_auditevent_p' || to_char(starts AT TIME ZONE 'UTC', 'YYYYMM');
        CONTINUE WHEN to_regclass(name) IS NOT NULL;
        BEGIN
            EXECUTE format('CREATE TABLE %I (LIKE ledger_auditevent INCLUDING CONSTRAINTS)', name);
            EXECUTE format('CREATE TRIGGER ledger_auditevent_no_truncate BEFORE TRUNCATE ON %I '
                           'FOR EACH STATEMENT EXECUTE FUNCTION ledger_audit_no_truncate()', name);
            EXECUTE format('ALTER TABLE ledger_auditevent ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                           name, starts, starts + interval '1 month');
            created := created || to_jsonb(name);
        EXCEPTION
            WHEN invalid_object_definition THEN  -- "would overlap": the history covers the month
                NULL;
            WHEN check_violation THEN  -- the default partition holds events of the month
                held_back := held_back || to_jsonb(name);
        END;
    END LOOP;
    RETURN jsonb_build_object('created', created, 'held_back', held_back);
END
$function$
"""

AUDIT_PARTITIONS_BEFORE = r"""
CREATE OR REPLACE FUNCTION public.ledger_audit_partitions(first timestamp with time zone, months integer)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    starts timestamptz;
    name text;
    created jsonb := '[]';
    held_back jsonb := '[]';
BEGIN
    IF months IS NULL OR months < 1 OR months > 240 THEN
        RAISE EXCEPTION 'ledger_audit_partitions: months must be 1 to 240, not %', months;
    END IF;
    -- One creator at a time: two sweeps would both find a month missing.
    PERFORM pg_advisory_xact_lock(x'41554450'::bigint << 32);
    FOR step IN 0 .. months - 1 LOOP
        starts := date_trunc('month', first, 'UTC') + make_interval(months => step);
        name := 'ledger_auditevent_p' || to_char(starts AT TIME ZONE 'UTC', 'YYYYMM');
        CONTINUE WHEN to_regclass(name) IS NOT NULL;
        BEGIN
            EXECUTE format('CREATE TABLE %I (LIKE ledger_auditevent)', name);
            EXECUTE format('CREATE TRIGGER ledger_auditevent_no_truncate BEFORE TRUNCATE ON %I '
                           'FOR EACH STATEMENT EXECUTE FUNCTION ledger_audit_no_truncate()', name);
            EXECUTE format('ALTER TABLE ledger_auditevent ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                           name, starts, starts + interval '1 month');
            created := created || to_jsonb(name);
        EXCEPTION
            WHEN invalid_object_definition THEN  -- "would overlap": the history covers the month
                NULL;
            WHEN check_violation THEN  -- the default partition holds events of the month
                held_back := held_back || to_jsonb(name);
        END;
    END LOOP;
    RETURN jsonb_build_object('created', created, 'held_back', held_back);
END
$function$
"""


class Migration(migrations.Migration):
    dependencies = [("ledger", "0064_operation_state_idx_partial")]

    operations = [
        migrations.AddField(
            model_name="auditevent",
            name="lane",
            field=models.PositiveSmallIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="workspace",
            name="audit_lanes",
            field=models.PositiveSmallIntegerField(
                db_default=1,
                default=1,
                help_text="Audit chains its events are spread over (1 to 64): more lets more appends run at once.",
            ),
        ),
        migrations.AddIndex(
            model_name="auditevent",
            index=models.Index(
                condition=models.Q(("lane", 0), _negated=True),
                fields=["workspace", "lane", "id"],
                name="audit_lane_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="workspace",
            constraint=models.CheckConstraint(
                condition=models.Q(("audit_lanes__gte", 1), ("audit_lanes__lte", 64)),
                name="workspace_audit_lanes_range",
            ),
        ),
        migrations.RunSQL(
            [
                AUDIT_LANE,
                CHAIN_LOCK,
                CHAIN_HEAD,
                AUDIT_HEAD,
                RESERVE,
                RESERVE_ONE,
                CLAIM,
                REPORT_OUTCOME,
                FINISH_CLAIMED,
                AUDIT_PARTITIONS,
                "DROP FUNCTION public.ledger_audit_head(bigint, bigint, integer)",
                "DROP FUNCTION public.ledger_chain_head(bigint)",
            ],
            reverse_sql=[
                CHAIN_HEAD_BEFORE,
                AUDIT_HEAD_BEFORE,
                RESERVE_BEFORE,
                RESERVE_ONE_BEFORE,
                CLAIM_BEFORE,
                REPORT_OUTCOME_BEFORE,
                FINISH_CLAIMED_BEFORE,
                AUDIT_PARTITIONS_BEFORE,
                "DROP FUNCTION public.ledger_audit_head(bigint, bigint[], boolean)",
                "DROP FUNCTION public.ledger_chain_head(bigint, integer)",
                "DROP FUNCTION public.ledger_chain_lock(bigint, integer)",
                "DROP FUNCTION public.ledger_audit_lane(bigint, integer)",
            ],
        ),
    ]
