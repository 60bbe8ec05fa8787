-- One field of an audit event's encoding: its length in UTF-8 bytes, a colon and its text ("" for
-- none), so that no two events share an encoding (ledger.core.audit_chain, the Python twin).
-- Called by: ledger_audit_encoding. Made by migration 0009.

CREATE OR REPLACE FUNCTION public.ledger_audit_field(value text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$ SELECT octet_length(coalesce(value, ''))::text || ':' || coalesce(value, '') $function$;
