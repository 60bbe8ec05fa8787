-- The function of the row trigger ledger_auditevent_append_only: every UPDATE and DELETE of an
-- audit event is refused, whoever asks (docs/design.md: the audit trail is append-only).
-- Called by: that trigger (auditevent_append_only.trigger.sql). Made by migration 0002.

CREATE OR REPLACE FUNCTION public.ledger_audit_append_only()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    RAISE EXCEPTION 'ledger_auditevent is append-only: % refused', TG_OP;
END;
$function$;
