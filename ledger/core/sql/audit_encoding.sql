-- The bytes an audit event's hash covers: its fields in a fixed order, each through
-- ledger_audit_field, the time as microseconds since 1970, then the times its message names
-- (ledger.timed; jsonb's own text, the same when written and when read back) where it has any: an
-- event without (every event before migration 0039) has the bytes it had. The same bytes as
-- Python's ledger.core.audit_chain (tests/ledger/test_audit_keyed.py holds the two together).
-- Called by: ledger_audit_hash. Made by migration 0039 (first by 0030).

CREATE OR REPLACE FUNCTION public.ledger_audit_encoding(event jsonb)
 RETURNS bytea
 LANGUAGE sql
 STABLE
AS $function$
SELECT convert_to(
    ledger_audit_field(event->>'prev_hash') || ledger_audit_field(event->>'workspace_id')
    || ledger_audit_field(event->>'operation_id') || ledger_audit_field(event->>'attempt_id')
    || ledger_audit_field(event->>'actor') || ledger_audit_field(event->>'kind')
    || ledger_audit_field(event->>'from_state') || ledger_audit_field(event->>'to_state')
    || ledger_audit_field(event->>'error_category') || ledger_audit_field(event->>'message')
    || ledger_audit_field((extract(epoch FROM (event->>'created_at')::timestamptz) * 1000000)::bigint::text)
    || CASE WHEN event->>'times' IS NULL THEN '' ELSE ledger_audit_field(event->>'times') END,
    'UTF8')
$function$;
