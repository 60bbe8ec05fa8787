-- The transaction-scoped advisory lock that serialises appends to one audit chain: a workspace's
-- lane (the global chain, workspace none, is 0 and has one lane). Lane 0's key is the one every
-- chain had before lanes: "AUDT" in the high 32 bits, the workspace id in the low ones; lane n > 0
-- has "AUL" and n there instead (Workspace.audit_lanes is at most 64), so no two chains share a key.
-- Called by: ledger_audit_head. Made by migration 0065.

CREATE OR REPLACE FUNCTION public.ledger_chain_lock(chain bigint, lane integer)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT (CASE WHEN lane = 0 THEN x'41554454'::bigint ELSE x'41554c00'::bigint | lane END << 32) | coalesce(chain, 0)
$function$;
