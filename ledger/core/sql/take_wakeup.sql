-- The coalesced wake-up of the worker cluster: a pending wake-up is kept, KEY SHARE-locked until
-- the caller commits; else the caller's is it. True when the caller took it (it then enqueues a
-- task after its commit).
-- Called by: ledger.core.nudges.request_processing, ledger_reserve, ledger_reserve_one. Made by
-- migration 0024.

CREATE OR REPLACE FUNCTION public.ledger_take_wakeup(at timestamp with time zone)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM 1 FROM ledger_wakeup WHERE name = 'process' FOR KEY SHARE;
    IF FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO ledger_wakeup (name, requested_at) VALUES ('process', at) ON CONFLICT DO NOTHING;
    IF FOUND THEN
        RETURN true;
    END IF;
    -- Another transaction inserted it meanwhile (the INSERT waited for its commit): keep it.
    PERFORM 1 FROM ledger_wakeup WHERE name = 'process' FOR KEY SHARE;
    RETURN false;
END
$function$;
