-- Refuses UPDATE and DELETE of the installation record (ledger_audit_append_only): its id and
-- keying date are written once, by migration 0045.

CREATE TRIGGER ledger_auditinstallation_fixed BEFORE DELETE OR UPDATE ON public.ledger_auditinstallation FOR EACH ROW EXECUTE FUNCTION ledger_audit_append_only();
