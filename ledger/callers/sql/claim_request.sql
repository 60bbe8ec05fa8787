-- A claim request in one statement (ledger.callers.claiming.CALL): each item, merged with what its
-- action's claims share (sent once a request, by action name in `shared`), claimed by
-- ledger_claim in its order; then the request's claims counted on this process's row
-- (`tally_shard`, ledger.core.tallies.shard), once per answer's labels, not once per claim.
-- Answers each item's answer, in order. A function rather than the statement itself: PostgreSQL
-- plans the statement once per session here, where sent as text it was planned at every request
-- (~0.3 ms of a single claim's). The counter's name is ledger.core.tallies.CLAIMS.
-- Called by: ledger.callers.claiming (its CALL). Made by migration 0073.

CREATE OR REPLACE FUNCTION public.ledger_claim_request(items jsonb, shared jsonb, tally_shard text)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    answers jsonb;
BEGIN
    -- Each item decided in its order (MATERIALIZED: once each, before any is counted), merged with
    -- what its action's claims share; then the request's claims counted on this process's row,
    -- once per answer's labels.
    WITH claims AS MATERIALIZED (
        SELECT r.n, ledger_claim(c.common || r.item || jsonb_build_object('reserve',
                   CASE WHEN r.item ? 'reserve' THEN c.common->'reserve' || (r.item->'reserve') ELSE 'null' END)) AS answer
        FROM jsonb_array_elements(items) WITH ORDINALITY AS r(item, n)
        CROSS JOIN LATERAL (SELECT shared->(r.item->>'action') AS common) c
    ), counted AS (
        INSERT INTO ledger_tally (name, labels, shard, value)
        SELECT 'claims', answer->>'tally', tally_shard, count(*) FROM claims
        WHERE answer->>'tally' IS NOT NULL
        GROUP BY answer->>'tally' ORDER BY answer->>'tally'
        ON CONFLICT (name, labels, shard) DO UPDATE SET value = ledger_tally.value + excluded.value
    )
    SELECT jsonb_agg(answer ORDER BY n) INTO answers FROM claims;
    RETURN answers;
END
$function$;
