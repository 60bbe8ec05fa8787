-- Refuses TRUNCATE of the archive records (ledger_audit_no_truncate). Made by migration 0062.

CREATE TRIGGER ledger_auditarchive_no_truncate BEFORE TRUNCATE ON public.ledger_auditarchive FOR EACH STATEMENT EXECUTE FUNCTION ledger_audit_no_truncate();
