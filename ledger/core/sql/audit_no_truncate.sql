-- The function of the statement triggers ledger_auditevent_no_truncate and
-- ledger_auditinstallation_no_truncate: TRUNCATE of the audit trail (or of the installation record)
-- is refused (a row trigger never sees a TRUNCATE).
-- Called by: those triggers. Made by migration 0030; the table named in the message by 0045.

CREATE OR REPLACE FUNCTION public.ledger_audit_no_truncate()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    RAISE EXCEPTION '% is append-only: TRUNCATE refused', TG_TABLE_NAME;
END;
$function$;
