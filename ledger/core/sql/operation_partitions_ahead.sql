-- The next ranges of operations for deliveries and attempts, made ahead: up to two ranges past the
-- newest operation, each as wide as the newest range (1,000,000 ids at first). SECURITY DEFINER,
-- owned by the tables' owner: the serving role (which may not create a partition) calls it from the
-- sweep, and can do no more with it than make the next ranges a little early. Fixed search path.
-- Called by: ledger.core.operation_partitions.create_ahead (the sweep).

CREATE OR REPLACE FUNCTION public.ledger_operation_partitions_ahead()
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
    WITH newest AS (
        SELECT (bounds[2]::bigint - bounds[1]::bigint) AS width
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
             regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''(\d+)''\) TO \(''(\d+)''\)') AS bounds
        WHERE i.inhparent = 'ledger_attempt'::regclass AND bounds IS NOT NULL
        ORDER BY bounds[2]::bigint DESC LIMIT 1
    ), sized AS (SELECT coalesce((SELECT width FROM newest), 1000000) AS width)
    SELECT ledger_operation_partitions(width, (SELECT last_value FROM ledger_operation_id_seq) + 2 * width)
    FROM sized
$function$;
