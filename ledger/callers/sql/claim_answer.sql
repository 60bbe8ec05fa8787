-- How a claim of `operation` is answered now, as ledger.callers.claims.standing decides it, deciding
-- nothing else and writing nothing: done, in_progress, decided (the state says which), held (the
-- pause `switch`), retry_later, waiting, awaiting_approval, overdue (a lease expired or a deadline
-- passed) or claimed; with `held`, its deadline with the time pauses held it given (the one a claim
-- sets). `operation` may be a row not inserted yet (no id): the one a claim's reservation would
-- create, decided first so that it is created claimed when it may be.
-- Called by: ledger_claim (under its plan_cache_mode), twice at most. Made by migration 0063.

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
$function$;
