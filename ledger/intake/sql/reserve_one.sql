-- ledger_reserve for a request of one event and no refused delivery, in plain statements (the
-- shape of nearly every request). The same request, answer and rows as ledger_reserve
-- (tests/ledger/intake/test_reserve_one.py holds the two together).
-- Called by: ledger.intake.reservation on PostgreSQL. Made by migration 0024; the hold of a
-- conflicting operation (on_conflict: hold) added by 0040; the audit events returned with the
-- chain's head, for the caller to seal and insert (the key never reaches the database), by 0045;
-- the head read by ledger_chain_head (with its time) since 0061; the event on its operation's lane
-- of the workspace's chains (the heads by lane), all of them locked for a claim batch
-- (``every_lane``: ledger_audit_head), since 0065.

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
$function$;
