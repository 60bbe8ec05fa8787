-- The bookkeeping of a set of internal operations finished in their claim: one guarded UPDATE
-- to succeeded under the claim's tokens, then the ok Attempts and one audit event per operation
-- for its one real change, pending (or retrying) -> succeeded, the claim's token in its message.
-- Returns how many rows it moved and, when it moved them all, each workspace's events, each on its
-- operation's lane, with the heads of those lanes read under their locks (ledger_audit_head), for
-- the caller to seal and insert (the audit key never reaches the database).
-- Called by: ledger.engine.succeeded.record_claimed_successes
-- (tests/ledger/engine/test_finish_claimed.py). Made by migration 0029; one event, migration 0044; the
-- events returned, not hashed here, 0045; the lanes (the heads by lane), 0065.

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
$function$;
