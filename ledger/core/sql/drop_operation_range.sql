-- Drops the deliveries' and attempts' partitions of the range of operations that begins at `first`,
-- once every operation of it has been made and has finished (retention deletes them after this).
-- Whoever may call it (the serving role, by SECURITY DEFINER) may already delete those rows: the
-- drop is that delete without the dead rows. A conflict that still names one of the deliveries
-- stops it (its foreign key); so does a lock held more than 5 s. Fixed search path.
-- Called by: ledger.core.operation_partitions.drop_range (ledger.retention).

CREATE OR REPLACE FUNCTION public.ledger_drop_operation_range(first bigint)
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
DECLARE
    parts text[];
    ends bigint;
    part text;
BEGIN
    SELECT array_agg(c.relname::text ORDER BY c.relname), max(bounds[2]::bigint) INTO parts, ends
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
         regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''(\d+)''\) TO \(''(\d+)''\)') AS bounds
    WHERE i.inhparent IN ('ledger_delivery'::regclass, 'ledger_attempt'::regclass) AND bounds[1]::bigint = first;
    IF coalesce(array_length(parts, 1), 0) <> 2 THEN
        RAISE EXCEPTION 'no range of operations begins at %', first USING ERRCODE = 'undefined_table';
    END IF;
    IF ends - 1 > (SELECT last_value FROM ledger_operation_id_seq) THEN
        RAISE EXCEPTION 'operations % to % are not all made yet: the range stays', first, ends - 1
            USING ERRCODE = 'object_in_use';
    END IF;
    -- Held before looking (SHARE: read on, not written): no delivery or attempt arrives in them
    -- while the range's operations are read. A reader of the tables holds the detach up: it waits
    -- 5 s at most for its locks, then the next run tries again.
    PERFORM set_config('lock_timeout', '5s', true);
    EXECUTE format('LOCK TABLE %I, %I IN SHARE MODE', parts[1], parts[2]);
    IF EXISTS (SELECT 1 FROM ledger_operation WHERE id >= first AND id < ends
               AND state NOT IN ('cancelled', 'rejected', 'succeeded', 'superseded')) THEN
        RAISE EXCEPTION 'operations % to % are not all finished: the range stays', first, ends - 1
            USING ERRCODE = 'object_in_use';
    END IF;
    -- Detaching a range of deliveries a conflict still names fails (its foreign key): deleted first.
    FOREACH part IN ARRAY parts LOOP
        EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', split_part(part, '_ops_', 1), part);
        EXECUTE format('DROP TABLE %I', part);
    END LOOP;
    RETURN to_jsonb(parts);
END
$function$;
