-- The ranges of operations that deliveries and attempts are partitioned by (migration 0068): from the
-- top of the highest range (or 0) on, ranges of `width` operation ids, up to the one that holds
-- `upto`, for both tables, where missing (at most 100 a call). Attached, not created as partitions, so
-- readers and writers go on; a range whose rows the default partition already holds (the sweep fell
-- behind) is held back and logged, its rows left in the default partition. Owner only.
-- Called by: migration 0068; ledger.core.operation_partitions.ensure (the bench's load, tests).

CREATE OR REPLACE FUNCTION public.ledger_operation_partitions(width bigint, upto bigint)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    tables constant text[] := ARRAY['ledger_delivery', 'ledger_attempt'];
    top bigint;
    starts bigint;
    made integer := 0;
    base text;
    name text;
    created jsonb := '[]';
    held_back jsonb := '[]';
BEGIN
    IF width IS NULL OR width < 1000 THEN
        RAISE EXCEPTION 'ledger_operation_partitions: width must be at least 1000 operations, not %', width;
    END IF;
    -- One maker at a time: two sweeps would both find a range missing.
    PERFORM pg_advisory_xact_lock(x'4f505250'::bigint << 32);
    -- The ranges go on from the top of the highest one (the history's, or the last made), or from
    -- 0 on a new installation; the deliveries' and the attempts' are made together.
    SELECT max((regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''(\d+)''\)'))[1]::bigint) INTO top
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'ledger_attempt'::regclass;
    starts := coalesce(top, 0);
    WHILE starts < upto AND made < 100 LOOP
        FOREACH base IN ARRAY tables LOOP
            name := base || '_ops_' || starts;
            BEGIN
                EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name, base);
                -- ATTACH, not CREATE .. PARTITION OF: it holds the table with SHARE UPDATE EXCLUSIVE,
                -- so readers and writers go on.
                EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                               base, name, starts, starts + width);
                created := created || to_jsonb(name);
            EXCEPTION
                WHEN check_violation THEN  -- the default partition holds rows of the range
                    held_back := held_back || to_jsonb(name);
            END;
        END LOOP;
        starts := starts + width;
        made := made + 1;
    END LOOP;
    RETURN jsonb_build_object('created', created, 'held_back', held_back);
END
$function$;
