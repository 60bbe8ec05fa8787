-- Refuses TRUNCATE of ledger_auditevent (ledger_audit_no_truncate). Tests reset their database with
-- session_replication_role = replica (tests/conftest.py). Made by migration 0030.

CREATE TRIGGER ledger_auditevent_no_truncate BEFORE TRUNCATE ON public.ledger_auditevent FOR EACH STATEMENT EXECUTE FUNCTION ledger_audit_no_truncate();
