-- Refuses UPDATE and DELETE of an archive record (ledger_audit_append_only): a month taken out of
-- the audit trail is recorded once, by manage.py archive_audit. Made by migration 0062.

CREATE TRIGGER ledger_auditarchive_fixed BEFORE DELETE OR UPDATE ON public.ledger_auditarchive FOR EACH ROW EXECUTE FUNCTION ledger_audit_append_only();
