"""A claim request's statement as a function (``ledger/callers/sql/claim_request.sql`` as this
migration applied it; ``ledger.callers.claiming.CALL``).

A claim request was one statement sent as text: each item merged with what its action's claims
share and claimed by ``ledger_claim``, then the request's claims counted on this process's row.
PostgreSQL planned that statement at every request, ~0.3 ms of a single claim's ~1.4 ms in the
database. ``ledger_claim_request`` holds the same statement, which PL/pgSQL plans once per session;
the request sends ``SELECT ledger_claim_request(..)``, whose plan is trivial. Nothing it decides or
writes changes.
"""

from django.db import migrations

CLAIM_REQUEST = r"""
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
"""

DROP_CLAIM_REQUEST = "DROP FUNCTION public.ledger_claim_request(jsonb, jsonb, text);"


class Migration(migrations.Migration):
    dependencies = [("ledger", "0072_claim_shared_once_counted_once")]

    operations = [migrations.RunSQL(CLAIM_REQUEST, reverse_sql=DROP_CLAIM_REQUEST)]
