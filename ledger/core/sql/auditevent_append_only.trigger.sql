-- Refuses UPDATE and DELETE of ledger_auditevent, row by row (ledger_audit_append_only).
-- TRUNCATE is refused by auditevent_no_truncate.trigger.sql. Made by migration 0002.

CREATE TRIGGER ledger_auditevent_append_only BEFORE DELETE OR UPDATE ON public.ledger_auditevent FOR EACH ROW EXECUTE FUNCTION ledger_audit_append_only();
