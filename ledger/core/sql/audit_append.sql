-- Appends audit events to one chain in one call: locks the chain (advisory lock until the commit),
-- reads its head, hashes each event along it (ledger_audit_hash) and inserts them; returns each
-- event's [id, prev_hash, hash], in order.
-- Called by: ledger.core.audit_chain.append on PostgreSQL, ledger_finish_claimed.
-- Made by migration 0021; its generic plans set by 0022.

CREATE OR REPLACE FUNCTION public.ledger_audit_append(lock_key bigint, chain bigint, events jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    audit_ids regclass := pg_get_serial_sequence('ledger_auditevent', 'id')::regclass;
    audits jsonb[];
    previous text;
    place int;
BEGIN
    -- Locked until the commit, then read in a statement of its own, so the head is what the lock's
    -- previous holder committed (as ledger_audit_locked_head, 0008).
    PERFORM pg_advisory_xact_lock(lock_key);
    IF chain IS NULL THEN
        SELECT hash INTO previous FROM ledger_auditevent WHERE workspace_id IS NULL AND hash <> ''
        ORDER BY id DESC LIMIT 1;
    ELSE
        SELECT hash INTO previous FROM ledger_auditevent WHERE workspace_id = chain AND hash <> ''
        ORDER BY id DESC LIMIT 1;
    END IF;
    previous := coalesce(previous, '');
    SELECT array_agg(event ORDER BY place_in) INTO audits
    FROM jsonb_array_elements(events) WITH ORDINALITY AS given(event, place_in);
    FOR place IN 1 .. coalesce(array_length(audits, 1), 0) LOOP
        audits[place] := audits[place] || jsonb_build_object('id', nextval(audit_ids), 'prev_hash', previous);
        previous := ledger_audit_hash(audits[place]);
        audits[place] := audits[place] || jsonb_build_object('hash', previous);
    END LOOP;
    INSERT INTO ledger_auditevent
    SELECT r.* FROM unnest(audits) AS rows(row), LATERAL jsonb_populate_record(NULL::ledger_auditevent, row) r;
    RETURN (SELECT coalesce(jsonb_agg(jsonb_build_array(row->'id', row->'prev_hash', row->'hash') ORDER BY n), '[]'::jsonb)
            FROM unnest(audits) WITH ORDINALITY AS written(row, n));
END
$function$;
