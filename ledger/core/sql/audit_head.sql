-- Locks the audit chains a set of new events go to until the commit (transaction-scoped advisory
-- locks, ledger_chain_lock), reads each one's head and takes the events' ids, in order. The events
-- are those of one workspace (``chain``; null: the global chain), each named by its operation
-- (null for none): each goes to its operation's lane (ledger_audit_lane) of the workspace's
-- ``audit_lanes``, read here, so a change of the lane count is taken up by the next append. The
-- lanes are locked in order (two appenders never deadlock over them: docs/architecture.md, Lock
-- order), ``every_lane`` all of the workspace's (a claim batch, whose later items' lanes are not
-- known yet), and each head is read after its lock, in a statement of its own (it sees what the
-- lock's previous holder committed). The ids are taken once every lane is locked, so each lane's
-- rise along it. Answers {"heads": {"<lane>": [hash, time]}, "lanes": [each event's lane], "ids":
-- [each event's id]}; the caller seals each lane's events after its head in the application
-- process and inserts them (ledger.core.audit_chain).
-- Called by: ledger.core.audit_chain.append, ledger_reserve, ledger_reserve_one, ledger_claim,
-- ledger_finish_claimed, ledger_report_outcome. Made by migration 0045; the head read by
-- ledger_chain_head since 0061; lanes (the events' operations in, the heads by lane out) since 0065.

CREATE OR REPLACE FUNCTION public.ledger_audit_head(chain bigint, operations bigint[], every_lane boolean)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    lanes integer := 1;
    event_lanes integer[];
    heads jsonb := '{}';
    ids jsonb := '[]';
    each_lane integer;
BEGIN
    IF chain IS NOT NULL THEN
        lanes := coalesce((SELECT w.audit_lanes FROM ledger_workspace w WHERE w.id = chain), 1);
    END IF;
    SELECT coalesce(array_agg(ledger_audit_lane(o.operation, lanes) ORDER BY o.n), '{}') INTO event_lanes
    FROM unnest(operations) WITH ORDINALITY AS o(operation, n);
    FOR each_lane IN
        SELECT DISTINCT l.lane
        FROM unnest(CASE WHEN every_lane THEN ARRAY(SELECT generate_series(0, lanes - 1)) ELSE event_lanes END) AS l(lane)
        ORDER BY l.lane
    LOOP
        PERFORM pg_advisory_xact_lock(ledger_chain_lock(chain, each_lane));
        IF each_lane = ANY(event_lanes) THEN
            heads := heads || jsonb_build_object(each_lane::text, ledger_chain_head(chain, each_lane));
        END IF;
    END LOOP;
    FOR n IN 1 .. cardinality(operations) LOOP
        ids := ids || to_jsonb(nextval('ledger_auditevent_id_seq'));
    END LOOP;
    RETURN jsonb_build_object('heads', heads, 'lanes', to_jsonb(event_lanes), 'ids', ids);
END
$function$;
