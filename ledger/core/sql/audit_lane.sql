-- The lane (audit chain) of an operation's events in a workspace of ``lanes`` lanes
-- (Workspace.audit_lanes): a stable hash of the operation's id, so all its events go to one lane
-- while the lane count stays; 0 for an event of no operation and for every event when there is one
-- lane. The hash is Fibonacci hashing (the id times 2^32 over the golden ratio, modulo 2^32, its
-- high 16 bits), not the id itself: ids are handed out to every workspace from one sequence, so a
-- tenant's ids can follow a stride (a batch interleaved with another's) that the id modulo the lane
-- count would turn into one busy lane. Operation ids are positive; the arithmetic stays in bigint.
-- Called by: ledger_audit_head. Made by migration 0065.

CREATE OR REPLACE FUNCTION public.ledger_audit_lane(operation bigint, lanes integer)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT CASE WHEN operation IS NULL OR lanes <= 1 THEN 0
                ELSE ((operation % 2147483648) * 2654435761 % 4294967296 / 65536 % lanes)::integer END
$function$;
