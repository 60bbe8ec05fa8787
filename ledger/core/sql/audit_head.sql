-- Locks one audit chain until the commit (a transaction-scoped advisory lock), then reads its head
-- (ledger_chain_head, a statement of its own after the lock: it sees what the lock's previous holder
-- committed) and takes ``count`` event ids, in order: [[head hash, head time], [ids]]. The caller
-- seals its events after that head in the application process and inserts them (ledger.core.audit_chain).
-- Called by: ledger.core.audit_chain.append, ledger_finish_claimed, ledger_report_outcome. Made by
-- migration 0045; the head read by ledger_chain_head since 0061.

CREATE OR REPLACE FUNCTION public.ledger_audit_head(lock_key bigint, chain bigint, count integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    head jsonb;
    ids jsonb := '[]';
BEGIN
    PERFORM pg_advisory_xact_lock(lock_key);
    head := ledger_chain_head(chain);
    FOR n IN 1 .. count LOOP
        ids := ids || to_jsonb(nextval('ledger_auditevent_id_seq'));
    END LOOP;
    RETURN jsonb_build_array(head, ids);
END
$function$;
