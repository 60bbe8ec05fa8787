-- The function of the statement trigger ledger_auditevent_no_truncate: TRUNCATE of the audit
-- trail is refused (a row trigger never sees a TRUNCATE).
-- Called by: that trigger (auditevent_no_truncate.trigger.sql). Made by migration 0030.

CREATE OR REPLACE FUNCTION public.ledger_audit_no_truncate()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    RAISE EXCEPTION 'ledger_auditevent is append-only: TRUNCATE refused';
END;
$function$;
