-- Everything intake writes for the events of one request, in one statement: each new key reserved
-- by INSERT .. ON CONFLICT DO NOTHING (docs/design.md rule 2), the deliveries, conflicts and
-- contributions, the wake-up; and the audit events it would write, each on its lane of the
-- workspace's chains, with the heads of those lanes read under their locks (the caller seals and
-- inserts them: the audit key never reaches the database). The request and the answer are described in ledger.intake.reservation.
-- Called by: ledger.intake.reservation on PostgreSQL, for a batch (or any request with a refused
-- delivery); a single event goes to ledger_reserve_one. Made by migration 0024 (first by 0009);
-- the hold of a conflicting operation (on_conflict: hold) added by 0040; the audit events returned,
-- not hashed here, by 0045; the events' columns passed as typed arrays, not built from JSON rows,
-- and an API request's cached token checked first, by 0055; the chain's head read by
-- ledger_chain_head (with its time) by 0061; the workspace's lanes (each event on its operation's,
-- the heads by lane) by 0065.

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
$function$;
