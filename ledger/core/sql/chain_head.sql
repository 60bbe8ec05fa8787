-- One audit chain's head, read by whoever holds the chain's lock (a transaction-scoped advisory
-- lock, taken just before by the caller): [its hash ("" for a new chain), its time (null)]. A chain
-- is a workspace's lane (ledger_audit_head; the global chain, workspace none, has lane 0 only). The
-- caller seals its events after that head, none in a month before its month (ledger.core.audit_mac.seal),
-- so along a chain the months never go back and its events sit in the monthly partitions of the
-- trail in chain order.
-- Lane 0 is read along the workspace's events (audit_chain_idx), skipping the other lanes' few
-- newest; a later lane by its own index (audit_lane_idx, whose condition ``lane <> 0`` says). Each
-- read is ordered by its index's columns, the workspace (and lane) given as a range of one value,
-- and nothing else narrows it: one backward probe of each monthly partition's index, merged.
-- A generic plan cannot tell how many events a workspace has:
-- - with `workspace_id = chain` it drops the workspace from the order (it is fixed), sees the
--   primary key (id, created_at) serve the order just as well, and walked it back through every
--   other workspace's events to a quiet one's head (4.4 s at 5,000,000 events, past gunicorn's
--   timeout at 25,000,000: bench/results/2026-12-06-scale-5m-first-run.txt);
-- - with the months narrowed to the last two (`created_at >= ` the start of last month, until
--   0071) it took the workspace's kind index (workspace, kind, created_at), whose range holds that
--   condition, read every event of the workspace in this month and sorted them for the newest: an
--   append cost grew with the month's events (0.16 -> 0.87 ms a head within 90 s of intake; the
--   chain index reads 12 buffers where that read 5,369).
-- Called by: ledger_audit_head. Made by migration 0061; lanes added by 0065; ordered by its
-- indexes' columns by 0066; every month probed, none left to a condition on the time, by 0071.

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
