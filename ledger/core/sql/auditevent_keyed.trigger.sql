-- Refuses an audit event inserted without a MAC under an audit key (ledger_audit_unkeyed): from
-- migration 0045 on, every event is sealed in the application (ledger.core.audit_mac).

CREATE TRIGGER ledger_auditevent_keyed BEFORE INSERT ON public.ledger_auditevent FOR EACH ROW WHEN ((((new.hash)::text = ''::text) OR ((new.hash_key)::text = ''::text))) EXECUTE FUNCTION ledger_audit_unkeyed();
