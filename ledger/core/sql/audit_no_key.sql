-- Refuses to hash a keyed audit event that came without its key (ledger.core.audit_chain.keyed
-- puts the key in the event's JSON). STABLE, so that ledger_audit_hash stays inlinable.
-- Called by: ledger_audit_hash. Made by migration 0030.

CREATE OR REPLACE FUNCTION public.ledger_audit_no_key(key_id text)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RAISE EXCEPTION 'audit event hashed under key id % without its key (ledger.audit.keyed puts it in the row)', key_id;
END
$function$;
