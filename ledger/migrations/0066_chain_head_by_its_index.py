"""A chain's head read by its index under any plan (``ledger/core/sql/chain_head.sql`` as this
migration applied it): the workspace, and the lane, given as a range of one value and the read
ordered by the index's columns. With ``workspace_id = chain`` a generic plan (the function's
``plan_cache_mode``) drops the workspace from the order, finds the primary key (id, created_at)
serves it as well and, not knowing how few events a quiet workspace has, walked the key back
through every other workspace's events to its head: 4.4 s at 5,000,000 events, past gunicorn's
timeout at 25,000,000 (bench/results/2026-12-06-scale-5m-first-run.txt)."""

from django.db import migrations

CHAIN_HEAD = r"""
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
$function$
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
        WHERE workspace_id IS NULL AND lane = 0 AND hash <> '' AND created_at >= recent ORDER BY id DESC LIMIT 1;
        IF NOT FOUND THEN
            SELECT hash, created_at INTO head FROM ledger_auditevent
            WHERE workspace_id IS NULL AND lane = 0 AND hash <> '' ORDER BY id DESC LIMIT 1;
        END IF;
    ELSIF chain_lane = 0 THEN
        SELECT hash, created_at INTO head FROM ledger_auditevent
        WHERE workspace_id = chain AND lane = 0 AND hash <> '' AND created_at >= recent ORDER BY id DESC LIMIT 1;
        IF NOT FOUND THEN
            SELECT hash, created_at INTO head FROM ledger_auditevent
            WHERE workspace_id = chain AND lane = 0 AND hash <> '' ORDER BY id DESC LIMIT 1;
        END IF;
    ELSE
        SELECT hash, created_at INTO head FROM ledger_auditevent
        WHERE workspace_id = chain AND lane = chain_lane AND lane <> 0 AND hash <> '' AND created_at >= recent
        ORDER BY id DESC LIMIT 1;
        IF NOT FOUND THEN
            SELECT hash, created_at INTO head FROM ledger_auditevent
            WHERE workspace_id = chain AND lane = chain_lane AND lane <> 0 AND hash <> '' ORDER BY id DESC LIMIT 1;
        END IF;
    END IF;
    RETURN jsonb_build_array(coalesce(head.hash, ''), head.created_at);
END
$function$
"""


class Migration(migrations.Migration):
    dependencies = [("ledger", "0065_audit_lanes")]

    operations = [migrations.RunSQL(CHAIN_HEAD, reverse_sql=CHAIN_HEAD_BEFORE)]
