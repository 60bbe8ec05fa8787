-- What an operation's processing deadline is once the pauses that held it since its state last
-- moved are given back: each such interval of a switch over its workspace and action, in the order
-- they ended, adds its length to a deadline that had not passed when it was pulled, capped at a
-- whole deadline (``whole``, the action's) from its release.
-- Called by: ledger.core.held_time (the claims, due work, the sweep's late work). Made by
-- migration 0043.

CREATE OR REPLACE FUNCTION public.ledger_held_deadline(deadline timestamp with time zone, since timestamp with time zone, workspace bigint, action text, whole interval)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    held record;
    credited timestamptz := deadline;
BEGIN
    -- In the order they ended: a pause given first moves the deadline the next one compares with.
    FOR held IN
        SELECT p.started_at, p.ended_at FROM ledger_pauseinterval p
        WHERE p.ended_at > since
          AND (p.workspace_id IS NULL OR p.workspace_id = ledger_held_deadline.workspace)
          AND (p.action = '' OR p.action = ledger_held_deadline.action)
        ORDER BY p.ended_at, p.id
    LOOP
        -- Only a deadline that had not passed when the switch was pulled was held; it gets the
        -- time held, but never more than a whole deadline from the release.
        IF credited > held.started_at THEN
            credited := greatest(credited, least(credited + (held.ended_at - held.started_at), held.ended_at + whole));
        END IF;
    END LOOP;
    RETURN credited;
END
$function$;
