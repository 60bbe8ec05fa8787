-- The function of the row trigger ledger_auditevent_keyed: an audit event inserted without a MAC
-- under an audit key (hash or hash_key empty) is refused; the MAC itself is computed and checked in
-- the application (ledger.core.audit_mac), which the database cannot do without the key.
-- Called by: that trigger (auditevent_keyed.trigger.sql). Made by migration 0045.

CREATE OR REPLACE FUNCTION public.ledger_audit_unkeyed()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    RAISE EXCEPTION 'audit event refused: it has no MAC under an audit key (hash %, hash_key %)',
        quote_literal(NEW.hash), quote_literal(NEW.hash_key);
END;
$function$;
