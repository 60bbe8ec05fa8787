-- A caller's `succeeded` report under its claim in one statement: the operation found by its key, the
-- claim's Attempt and the row held (in the lock order of ledger.callers.reports), the report
-- fenced by the claim's token as ledger.callers.claims.current_claim fences it, and, when the
-- claim holds it with its lease running, recorded: the Attempt finished ok with the report's
-- digest, the guarded move processing -> succeeded (the claim's token as held), its tallies (the
-- try, the finished operation, its bucket and lateness, as ledger.core.tallies counts them) and its
-- one audit event, on the operation's lane of the workspace's chains, returned with that lane's head
-- read under its lock (ledger_audit_head) for the caller to seal and insert before the commit (the
-- audit key never reaches the database).
-- Answers (`answer`): recorded, repeated (the same report again), conflict (another report under
-- this claim: `attempt`), never_issued (the token names another operation), stale (not the current
-- claim), overdue (its lease expired: nothing written, the caller moves it as the sweep would),
-- not_found, other_action (the key's operation is not of the action the caller read from the key:
-- nothing done, the caller reports it in Python).
-- A request that names a `token` (the API let it in by its process's token cache) checks it first,
-- as ledger_reserve_one does: SQLSTATE OC401, nothing written, when the token changed since.
-- Called by: ledger.callers.reports. Made by migration 0058; the token's check added by 0059; the
-- lanes (the heads by lane) by 0065.

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
$function$;
