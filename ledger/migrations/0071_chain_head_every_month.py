"""A chain's head read along its index in every monthly partition (``ledger/core/sql/chain_head.sql``
as this migration applied it), no longer narrowed to the last two months by a condition on the
time. Under the function's generic plan that condition made the workspace's kind index
(workspace, kind, created_at) look as good as its chain index: a head read took every event the
workspace had written this month and sorted them for the newest, so an append grew dearer with
each event of the month (`make bench`'s HTTP intake after its other scenarios: PostgreSQL's CPU per
event 1.55, 2.52, 3.22, 3.95, 4.59 ms over five rounds, against a flat 1.0). Read by the chain
index alone, one backward probe per partition: 12 buffers where that plan read 5,369.
"""

from django.db import migrations

CHAIN_HEAD = r"""
CREATE OR REPLACE FUNCTION public.ledger_chain_head(chain bigint, chain_lane integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    head record;
BEGIN
    IF chain IS NULL THEN
        SELECT hash, created_at INTO head FROM ledger_auditevent
        WHERE workspace_id IS NULL AND lane = 0 AND hash <> ''
        ORDER BY workspace_id DESC, id DESC LIMIT 1;
    ELSIF chain_lane = 0 THEN
        SELECT hash, created_at INTO head FROM ledger_auditevent
        WHERE workspace_id >= chain AND workspace_id <= chain AND lane = 0 AND hash <> ''
        ORDER BY workspace_id DESC, id DESC LIMIT 1;
    ELSE
        SELECT hash, created_at INTO head FROM ledger_auditevent
        WHERE workspace_id >= chain AND workspace_id <= chain AND lane >= chain_lane AND lane <= chain_lane
          AND lane <> 0 AND hash <> ''
        ORDER BY workspace_id DESC, lane DESC, id DESC LIMIT 1;
    END IF;
    RETURN jsonb_build_array(coalesce(head.hash, ''), head.created_at);
END
$function$;
"""

CHAIN_HEAD_BEFORE = r"""
CREATE OR REPLACE FUNCTION public.ledger_chain_head(chain bigint, chain_lane integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    recent timestamptz := date_trunc('month', now(), 'UTC') - interval '1 month';
    head record;
BEGIN
    IF chain IS NULL THEN
        SELECT hash, created_at INTO head FROM ledger_auditevent
        WHERE workspace_id IS NULL AND lane = 0 AND hash <> '' AND created_at >= recent
        ORDER BY workspace_id DESC, id DESC LIMIT 1;
        IF NOT FOUND THEN
            SELECT hash, created_at INTO head FROM ledger_auditevent
            WHERE workspace_id IS NULL AND lane = 0 AND hash <> '' ORDER BY workspace_id DESC, id DESC LIMIT 1;
        END IF;
    ELSIF chain_lane = 0 THEN
        SELECT hash, created_at INTO head FROM ledger_auditevent
        WHERE workspace_id >= chain AND workspace_id <= chain AND lane = 0 AND hash <> '' AND created_at >= recent
        ORDER BY workspace_id DESC, id DESC LIMIT 1;
        IF NOT FOUND THEN
            SELECT hash, created_at INTO head FROM ledger_auditevent
            WHERE workspace_id >= chain AND workspace_id <= chain AND lane = 0 AND hash <> ''
            ORDER BY workspace_id DESC, id DESC LIMIT 1;
        END IF;
    ELSE
        SELECT hash, created_at INTO head FROM ledger_auditevent
        WHERE workspace_id >= chain AND workspace_id <= chain AND lane >= chain_lane AND lane <= chain_lane
          AND lane <> 0 AND hash <> '' AND created_at >= recent
        ORDER BY workspace_id DESC, lane DESC, id DESC LIMIT 1;
        IF NOT FOUND THEN
            SELECT hash, created_at INTO head FROM ledger_auditevent
            WHERE workspace_id >= chain AND workspace_id <= chain AND lane >= chain_lane AND lane <= chain_lane
              AND lane <> 0 AND hash <> ''
            ORDER BY workspace_id DESC, lane DESC, id DESC LIMIT 1;
        END IF;
    END IF;
    RETURN jsonb_build_array(coalesce(head.hash, ''), head.created_at);
END
$function$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0070_claim_event_after_its_reservation"),
    ]

    operations = [migrations.RunSQL(CHAIN_HEAD, reverse_sql=CHAIN_HEAD_BEFORE)]
