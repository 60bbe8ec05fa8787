-- An audit event's hash: HMAC-SHA256 of its encoding under the key whose pads its JSON carries
-- (audit_ipad, audit_opad, beside the columns; never stored; ledger.core.audit_chain.key_fields),
-- computed with the built-in sha256() alone (no pgcrypto), or SHA-256 for an event written before
-- keys (hash_key ""). Plain expressions, so the planner inlines it where it is called.
-- Called by: ledger_audit_append, ledger_reserve, ledger_reserve_one; tests/ledger/test_audit*.py.
-- Made by migration 0031 (first by 0009, keyed by 0030).

CREATE OR REPLACE FUNCTION public.ledger_audit_hash(event jsonb)
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$
SELECT CASE WHEN coalesce(event->>'hash_key', '') = '' THEN encode(sha256(ledger_audit_encoding(event)), 'hex')
            ELSE coalesce(encode(sha256(decode(event->>'audit_opad', 'hex')
                                        || sha256(decode(event->>'audit_ipad', 'hex') || ledger_audit_encoding(event))),
                                 'hex'),
                          ledger_audit_no_key(event->>'hash_key')) END
$function$;
