-- Inserts one chain's events as the application sealed them (ledger.core.audit_chain.insert), in
-- the order given: a function so that the INSERT is planned once per session, not at every append.
-- The caller holds the chain's lock (ledger_audit_head, or the function that returned the events).
-- Called by: ledger.core.audit_chain, ledger.intake.reservation. Made by migration 0045.

CREATE OR REPLACE FUNCTION public.ledger_audit_insert(events jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
BEGIN
    INSERT INTO ledger_auditevent
    SELECT r.* FROM jsonb_populate_recordset(NULL::ledger_auditevent, events) r;
END
$function$;
