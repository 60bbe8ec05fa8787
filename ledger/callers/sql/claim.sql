-- A caller's claim in one statement: the event reserved (ledger_reserve_one, when the claim is an
-- envelope) or the recorded operation found (a claim by key), its row held, and the claim decided
-- as ledger.callers.claims.standing decides it; when it may be claimed, claimed: processing under
-- the next fencing token and a lease, its try's Attempt opened and audited. The audit
-- events (the reservation's, the claim's) are returned with the chain's head, for the caller to
-- seal and insert before the commit (the audit key never reaches the database).
-- Answers (`answer`): done, in_progress, decided (the state says which), held (`switch`),
-- retry_later, waiting, awaiting_approval, claimed (`attempt`), blocked (a payload conflict: the
-- reservation answers), not_found (by key), overdue (a lease expired or a deadline passed: nothing
-- decided, the caller moves it as the sweep would, in Python, and claims again). Beside the answer,
-- the claims counter's labels for it (`tally`, none for overdue), which its caller
-- (ledger_claim_request, claim_request.sql) counts once per label for the request's claims,
-- after them all.
-- Lock order (docs/architecture.md): the operation's row first when it exists, then the chain (in
-- ledger_reserve_one); a row created here is seen by nobody else before the commit. An
-- item of a batch (``every_lane``) locks all the workspace's lanes, in order, where it takes its
-- own: a later item's lane is not known yet, and lanes taken in items' order could deadlock.
-- The request that names a `token` (the first of a request's claims, when the API let it in by
-- its process's token cache) checks it first, as ledger_reserve_one does: SQLSTATE OC401, nothing
-- written, when the token changed since the process read it.
-- An event not recorded yet whose claim is answered `claimed` (decided on the row its reservation
-- would create, by ledger_claim_answer) is reserved in its claimed state: one insert, where an
-- insert then an update wrote every index twice; its `reserved` event still says it arrived in its
-- first state, and its `claimed` event that it moved from there.
-- Called by: ledger_claim_request (since 0073; ledger.callers.claiming's statement before).
-- Made by migration 0056; the token's check, and the
-- configuration stored before a payload conflict's answer, added by 0059; the chain's head
-- read by ledger_chain_head (with its time) since 0061; the claim decided by ledger_claim_answer
-- and a new event reserved claimed, by 0063; the events on the operation's lane of the workspace's
-- chains (the heads by lane), every lane locked in a batch (``every_lane``), since 0065; the claim's
-- event after its reservation's on the lane and head that read, not read again, since 0070; the
-- claim's tally labels answered for the caller's statement to count (once per label, not once per
-- claim on one row), the reservation's answer without the operation answered beside it, and the
-- configuration stored before a claim by key is answered not found, since 0072.

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
    tally text;
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
    END IF;

    -- The configuration a try would begin under, stored when a request first names it (content
    -- addressed: a row that is there is found, nothing written), whatever this claim is answered, a
    -- payload conflict or a key not found too: the request's later claims of the action are sent it
    -- no more.
    IF request->'config' <> 'null' THEN
        INSERT INTO ledger_configversion
        SELECT r.* FROM jsonb_populate_record(NULL::ledger_configversion, request->'config') r
        ON CONFLICT DO NOTHING;
    END IF;
    IF reserve = 'null' AND (operation.id IS NULL OR operation.action <> request->>'action') THEN
        RETURN jsonb_build_object('answer', 'not_found');
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
        -- The chain, last: the operation's lane, its head under its lock. A reservation above took
        -- that lane and read its head for this operation's event: the claim's event follows it there
        -- (nothing is inserted before the commit, so a second read would find the same head).
        IF (audits->0->>'operation_id')::bigint = claimed.id THEN
            chain := jsonb_build_object('heads', '{}'::jsonb, 'lanes', jsonb_build_array(audits->0->'lane'),
                                        'ids', jsonb_build_array(nextval('ledger_auditevent_id_seq')));
        ELSE
            chain := ledger_audit_head(workspace, ARRAY[claimed.id], coalesce((request->>'every_lane')::boolean, false));
        END IF;
        heads := heads || (chain->'heads');
        audits := audits || jsonb_build_array(request->'audit' || jsonb_build_object(
            'operation_id', claimed.id, 'kind', 'claimed', 'from_state', operation.state, 'to_state', 'processing',
            'message', 'claim ' || claimed.fencing_token || ': the caller performs it',
            'attempt_id', attempt->'id', 'id', chain->'ids'->0, 'lane', chain->'lanes'->0));
    END IF;
    -- The reservation's answer but for the operation's row (answered once, below): what the caller
    -- needs of it when it did not conflict (its outcome, the wake-up it took).
    IF reserved IS NOT NULL THEN
        reserved := reserved - 'operations' - 'audit';
    END IF;
    -- The claims counter's labels for this answer (none for an overdue one, claimed again by the
    -- caller): the caller's statement counts a request's claims once per label.
    IF answer <> 'overdue' THEN
        tally := request->'tally_labels'->>(CASE answer WHEN 'decided' THEN operation.state ELSE answer END);
        IF tally IS NULL THEN
            RAISE EXCEPTION 'ledger_claim: no counter labels for the answer % (state %)', answer, operation.state;
        END IF;
    END IF;
    RETURN jsonb_build_object(
        'answer', answer, 'reserved', reserved, 'operation', CASE WHEN claimed.id IS NOT NULL THEN to_jsonb(claimed) ELSE to_jsonb(operation) END,
        'from_state', operation.state, 'attempt', attempt,
        'switch', switch, 'tally', tally,
        'audit', CASE WHEN jsonb_array_length(audits) > 0 THEN jsonb_build_array(heads, audits) END);
END
$function$;
