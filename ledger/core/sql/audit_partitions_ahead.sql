-- The monthly partitions of the audit trail for this month and the next three, created where
-- missing (ledger_audit_partitions). SECURITY DEFINER, owned by the trail's owner: the serving role
-- (which owns nothing and so may not create a partition) calls it from the sweep, and can do no more
-- with it than make the next months' partitions a little early. The search path is fixed, so no
-- object of the caller's stands in for one of these.
-- Called by: ledger.core.audit_partitions.create_ahead (the sweep). Made by migration 0061.

CREATE OR REPLACE FUNCTION public.ledger_audit_partitions_ahead()
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$ SELECT ledger_audit_partitions(now(), 4) $function$;
