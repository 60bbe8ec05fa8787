-- ledger.core.audit_chain.event_hash in SQL: HMAC-SHA256 of the event's encoding under the key its
-- JSON carries (audit_key, beside the columns; never stored), or SHA-256 for an event written
-- before keys (hash_key ""). Plain expressions, so the planner inlines it where it is called.
-- Called by: ledger_audit_append, ledger_reserve, ledger_reserve_one; tests/ledger/test_audit*.py.
-- Made by migration 0030 (first by 0009).

CREATE OR REPLACE FUNCTION public.ledger_audit_hash(event jsonb)
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$
SELECT CASE WHEN coalesce(event->>'hash_key', '') = '' THEN encode(sha256(ledger_audit_encoding(event)), 'hex')
            ELSE coalesce(encode(hmac(ledger_audit_encoding(event), convert_to(event->>'audit_key', 'UTF8'), 'sha256'),
                                 'hex'),
                          ledger_audit_no_key(event->>'hash_key')) END
$function$;
