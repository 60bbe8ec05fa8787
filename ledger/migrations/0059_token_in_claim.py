"""The token checked inside a claim and a succeeded report, as the reservation checks it
(migration 0055): ``ledger_claim`` and ``ledger_report_outcome`` given a request that names a
``token`` (an API token taken from the process's cache) check it first with
``ledger_token_unchanged`` and, if it changed, write nothing (SQLSTATE OC401), so the API sends no
lookup of its own before them. And ``ledger_claim`` stores the configuration a request's claims of
an action are sent once also when its claim is answered as a payload conflict (the next claim's
Attempt names it). The texts are ``ledger/callers/sql/claim.sql`` and
``report_outcome.sql`` as this migration applied them; the reverse restores those of 0056 and 0058."""

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
    reserved jsonb;
    operation ledger_operation;
    claimed ledger_operation;
    switch ledger_control;
    held timestamptz;
    since timestamptz;
    answer text;
    attempt jsonb;
    previous text := '';
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
        previous := reserved->'audit'->>0;
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
            SELECT hash INTO previous FROM ledger_auditevent
            WHERE workspace_id = workspace AND hash <> '' ORDER BY id DESC LIMIT 1;
            previous := coalesce(previous, '');
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
    previous text := '';
    audits jsonb := '[]';
BEGIN
    -- The row first when it is there (rows before the chain): a claimer that finds it waits here.
    SELECT * INTO operation FROM ledger_operation WHERE workspace_id = workspace AND key = wanted
    FOR NO KEY UPDATE;
    IF request->'reserve' <> 'null' THEN
        reserved := ledger_reserve_one(request->'reserve');
        previous := reserved->'audit'->>0;
        audits := reserved->'audit'->1;
        IF reserved->'results'->0->>'outcome' = 'conflict' THEN
            RETURN jsonb_build_object('answer', 'blocked', 'reserved', reserved, 'audit', jsonb_build_array(previous, audits));
        END IF;
        IF operation.id IS NULL THEN
            -- Created by this reservation (no one else sees it yet), or by another since the read
            -- above (committed: the reservation waited for it).
            SELECT * INTO operation FROM ledger_operation WHERE workspace_id = workspace AND key = wanted
            FOR NO KEY UPDATE;
        END IF;
    ELSIF operation.id IS NULL OR operation.action <> request->>'action' THEN
        RETURN jsonb_build_object('answer', 'not_found');
    END IF;

    -- The configuration a try would begin under, stored when a request first names it (content
    -- addressed: a row that is there is found, nothing written), whatever this claim is answered.
    IF request->'config' <> 'null' THEN
        INSERT INTO ledger_configversion
        SELECT r.* FROM jsonb_populate_record(NULL::ledger_configversion, request->'config') r
        ON CONFLICT DO NOTHING;
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
            SELECT hash INTO previous FROM ledger_auditevent
            WHERE workspace_id = workspace AND hash <> '' ORDER BY id DESC LIMIT 1;
            previous := coalesce(previous, '');
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
$function$;
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


class Migration(migrations.Migration):
    dependencies = [("ledger", "0058_outcome_in_one_call")]

    operations = [
        migrations.RunSQL([CLAIM, REPORT_OUTCOME], reverse_sql=[CLAIM_BEFORE, REPORT_OUTCOME_BEFORE]),
    ]
