-- The operations of a workspace with the given keys, as {key: row}: one probe of
-- operation_unique_key per key.
-- Called by: ledger_reserve. Made by migration 0009 (made again, unchanged, by 0024).

CREATE OR REPLACE FUNCTION public.ledger_operations_of(workspace bigint, keys text[])
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    operations jsonb;
BEGIN
    -- One probe of operation_unique_key per key (OFFSET 0 keeps the subquery a parameterised
    -- lookup on both columns: joined plainly, stale statistics made the key a filter instead).
    -- PL/pgSQL rather than SQL, so that the plan is kept between calls.
    SELECT coalesce(jsonb_object_agg(existing.key, to_jsonb(existing)), '{}') INTO operations
    FROM unnest(keys) AS wanted(key),
    LATERAL (SELECT * FROM ledger_operation o WHERE o.workspace_id = workspace AND o.key = wanted.key OFFSET 0) existing;
    RETURN operations;
END
$function$;
