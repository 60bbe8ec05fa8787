-- The function of the trigger ledger_announce_task: notifies ledger_task_enqueued (at the
-- enqueuing transaction's commit), so the cluster's pusher, waiting on LISTEN, takes a new task
-- at once (ledger.engine.brokers).
-- Called by: that trigger (announce_task.trigger.sql). Made by migration 0028.

CREATE OR REPLACE FUNCTION public.ledger_announce_task()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_notify('ledger_task_enqueued', '');
    RETURN NULL;
END
$function$;
