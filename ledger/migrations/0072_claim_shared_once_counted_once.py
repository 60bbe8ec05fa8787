"""A claim request's shared part sent once, and its claims counted once per answer
(``ledger/callers/sql/claim.sql`` as this migration applied it; ``ledger.callers.claiming.CALL``).

A claim batch of 100 sent each item's request whole: the reservation's row templates (the
operation's, the delivery's, the conflict's, the audit event's, every column), the attempt's, the
answer's counter labels, 4.4 kB an item, 445 kB a batch; and each item answered its reservation's
answer whole beside its own (the operation's row twice), 437 kB. ``ledger_claim`` is now given each
item merged with what its action's claims share, sent once a request (``CALL``), and answers the
reservation's outcome and wake-up without the operation's row it answers once beside it (the whole
reservation still for a payload conflict, which is answered as intake answers it). And each claim
upserted the claims counter on the process's row, 100 updates of one row a batch: it answers its
labels now (an answer without labels is an error, not a claim left uncounted), and the request's
statement counts its claims once per label. A claim by key answered not found (its operation purged
since the request looked its action up) stores the configuration the request sent it before it
answers: it was stored only past that answer, and the request's later claims, sent it no more,
opened attempts naming a configuration never stored (their commit failed).
"""

from django.db import migrations

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
$function$;
"""


class Migration(migrations.Migration):
    dependencies = [("ledger", "0071_chain_head_every_month")]

    operations = [migrations.RunSQL(CLAIM, reverse_sql=CLAIM_BEFORE)]
