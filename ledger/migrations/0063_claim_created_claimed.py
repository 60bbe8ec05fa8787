"""A claim decided by one function, ``ledger_claim_answer`` (``ledger/callers/sql/claim_answer.sql``), and
an event not recorded yet whose claim is answered ``claimed`` reserved in its claimed state by
``ledger_claim``: one insert of the operation, where an insert (pending) then an update
(processing) wrote each of its indexes twice and left a dead row version per claim. The answers,
fencing tokens, attempts and audit events are the same. The texts are
``ledger/callers/sql/claim.sql`` and ``claim_answer.sql`` as this migration applied them; the
reverse restores the claim of 0059."""

from django.db import migrations

CLAIM_ANSWER = r"""
CREATE OR REPLACE FUNCTION public.ledger_claim_answer(operation ledger_operation, request jsonb, OUT answer text, OUT held timestamp with time zone, OUT switch jsonb)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    at timestamptz := (request->>'now')::timestamptz;
    since timestamptz := coalesce(operation.state_changed_at, operation.created_at);
    paused ledger_control;
BEGIN
    held := CASE WHEN since < (SELECT p.ended_at FROM ledger_pauseinterval p ORDER BY p.ended_at DESC LIMIT 1)
                 THEN ledger_held_deadline(operation.deadline, since, operation.workspace_id, operation.action,
                                           make_interval(secs => (request->>'whole_deadline')::double precision))
                 ELSE operation.deadline END;
    IF operation.state = 'succeeded' THEN
        answer := 'done';
    ELSIF operation.state = 'processing' THEN
        answer := CASE WHEN operation.lease_expires_at > at THEN 'in_progress' ELSE 'overdue' END;
    ELSIF operation.state NOT IN ('pending', 'retrying') THEN
        answer := 'decided';
    ELSE
        -- A pause first: time held by a pause does not count against the deadline.
        SELECT * INTO paused FROM ledger_control c
        WHERE c.paused AND (c.workspace_id IS NULL OR c.workspace_id = operation.workspace_id)
          AND c.action IN ('', operation.action)
        ORDER BY c.id LIMIT 1;
        IF paused.id IS NOT NULL THEN
            answer := 'held';
            switch := to_jsonb(paused);
        ELSIF operation.next_attempt_at > at THEN
            answer := 'retry_later';
        ELSIF held <= at THEN
            answer := 'overdue';
        ELSIF operation.ordered = 'in_order' AND operation.version > 1 AND NOT EXISTS (
            SELECT FROM ledger_operation p
            WHERE p.series <> '' AND p.workspace_id = operation.workspace_id AND p.series = operation.series
              AND p.version = operation.version - 1
              AND p.state IN (SELECT jsonb_array_elements_text(request->'terminal_states'))) THEN
            answer := 'waiting';
        ELSIF (request->>'consequential')::boolean AND NOT coalesce((
            -- Approved as it is now (Operation.approved_as_is): the latest decision approved this
            -- payload, by a person who neither submitted, changed nor replayed it (four eyes).
            SELECT a.decision = 'approved' AND a.fingerprint = operation.fingerprint AND NOT EXISTS (
                       SELECT FROM ledger_contribution c JOIN auth_user u ON u.id = c.user_id
                       WHERE c.operation_id = operation.id AND u.username = a.approver)
            FROM ledger_approval a WHERE a.operation_id = operation.id ORDER BY a.id DESC LIMIT 1), false) THEN
            answer := 'awaiting_approval';
        ELSE
            answer := 'claimed';
        END IF;
    END IF;
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
    reserved jsonb;
    operation ledger_operation;
    claimed ledger_operation;
    switch ledger_control;
    held timestamptz;
    since timestamptz;
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
    IF request->'reserve' <> 'null' THEN
        reserved := ledger_reserve_one(request->'reserve');
        previous := reserved->'audit'->0;
        audits := reserved->'audit'->1;
        IF operation.id IS NULL AND reserved->'results'->0->>'outcome' <> 'conflict' THEN
            -- Created by this reservation (no one else sees it yet), or by another since the read
            -- above (committed: the reservation waited for it).
            SELECT * INTO operation FROM ledger_operation WHERE workspace_id = workspace AND key = wanted
            FOR NO KEY UPDATE;
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
    since := coalesce(operation.state_changed_at, operation.created_at);
    held := CASE WHEN since < (SELECT p.ended_at FROM ledger_pauseinterval p ORDER BY p.ended_at DESC LIMIT 1)
                 THEN ledger_held_deadline(operation.deadline, since, operation.workspace_id, operation.action,
                                           make_interval(secs => (request->>'whole_deadline')::double precision))
                 ELSE operation.deadline END;
    IF operation.state = 'succeeded' THEN
        answer := 'done';
    ELSIF operation.state = 'processing' THEN
        answer := CASE WHEN operation.lease_expires_at > at THEN 'in_progress' ELSE 'overdue' END;
    ELSIF operation.state NOT IN ('pending', 'retrying') THEN
        answer := 'decided';
    ELSE
        -- A pause first: time held by a pause does not count against the deadline.
        SELECT * INTO switch FROM ledger_control c
        WHERE c.paused AND (c.workspace_id IS NULL OR c.workspace_id = operation.workspace_id)
          AND c.action IN ('', operation.action)
        ORDER BY c.id LIMIT 1;
        IF switch.id IS NOT NULL THEN
            answer := 'held';
        ELSIF operation.next_attempt_at > at THEN
            answer := 'retry_later';
        ELSIF held <= at THEN
            answer := 'overdue';
        ELSIF operation.ordered = 'in_order' AND operation.version > 1 AND NOT EXISTS (
            SELECT FROM ledger_operation p
            WHERE p.series <> '' AND p.workspace_id = operation.workspace_id AND p.series = operation.series
              AND p.version = operation.version - 1
              AND p.state IN (SELECT jsonb_array_elements_text(request->'terminal_states'))) THEN
            answer := 'waiting';
        ELSIF (request->>'consequential')::boolean AND NOT coalesce((
            -- Approved as it is now (Operation.approved_as_is): the latest decision approved this
            -- payload, by a person who neither submitted, changed nor replayed it (four eyes).
            SELECT a.decision = 'approved' AND a.fingerprint = operation.fingerprint AND NOT EXISTS (
                       SELECT FROM ledger_contribution c JOIN auth_user u ON u.id = c.user_id
                       WHERE c.operation_id = operation.id AND u.username = a.approver)
            FROM ledger_approval a WHERE a.operation_id = operation.id ORDER BY a.id DESC LIMIT 1), false) THEN
            answer := 'awaiting_approval';
        ELSE
            answer := 'claimed';
        END IF;
    END IF;

    IF answer = 'claimed' THEN
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
        'switch', CASE WHEN switch.id IS NOT NULL THEN to_jsonb(switch) END,
        'audit', CASE WHEN jsonb_array_length(audits) > 0 THEN jsonb_build_array(previous, audits) END);
END
$function$
"""


class Migration(migrations.Migration):
    dependencies = [("ledger", "0062_audit_archive")]

    operations = [
        migrations.RunSQL(
            [CLAIM_ANSWER, CLAIM],
            reverse_sql=[CLAIM_BEFORE, "DROP FUNCTION public.ledger_claim_answer(ledger_operation, jsonb)"],
        ),
    ]
