-- The function of the row triggers ledger_auditevent_append_only and ledger_auditinstallation_fixed:
-- every UPDATE and DELETE of an audit event (or of the installation record) is refused, whoever asks
-- (docs/design.md: the audit trail is append-only).
-- Called by: those triggers. Made by migration 0002; the table named in the message by 0045.

CREATE OR REPLACE FUNCTION public.ledger_audit_append_only()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP;
END;
$function$;
