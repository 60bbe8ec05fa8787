-- Refuses TRUNCATE of the installation record (ledger_audit_no_truncate). Made by migration 0045.

CREATE TRIGGER ledger_auditinstallation_no_truncate BEFORE TRUNCATE ON public.ledger_auditinstallation FOR EACH STATEMENT EXECUTE FUNCTION ledger_audit_no_truncate();
