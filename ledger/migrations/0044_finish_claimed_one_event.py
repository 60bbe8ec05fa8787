"""One audit event per real change for a set finished in its claim: ``ledger_finish_claimed``
writes, per operation, pending (or retrying) -> succeeded with the claim's token in its message,
instead of claimed then succeeded through a processing state no reader could see, and
stamps ``state_changed_at``. The state table gains those two edges (ledger.states). Both texts as
they were: the new one, and 0029's, which unapplying this makes again.
"""

from django.db import migrations

FINISH_CLAIMED = r"""
CREATE OR REPLACE FUNCTION public.ledger_finish_claimed(request jsonb)
 RETURNS integer
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    at timestamptz := (request->>'now')::timestamptz;
    changed int;
    held jsonb;
    chain jsonb;
    events jsonb;
BEGIN
    UPDATE ledger_operation o
    SET state = 'succeeded', attempts = o.attempts + 1, fencing_token = o.fencing_token + 1,
        result = h.result, external_id = h.external_id, updated_at = at, state_changed_at = at, lease_owner = '',
        lease_expires_at = NULL, next_attempt_at = NULL, last_error_category = '', last_error_message = ''
    FROM jsonb_to_recordset(request->'operations')
         AS h(id bigint, fencing_token bigint, result jsonb, external_id text)
    WHERE o.id = h.id AND o.fencing_token = h.fencing_token AND o.state IN ('pending', 'retrying');
    GET DIAGNOSTICS changed = ROW_COUNT;
    IF changed <> jsonb_array_length(request->'operations') THEN
        RETURN changed;
    END IF;

    -- Each operation with its Attempt (numbered by the claim's new token), in the given order.
    SELECT jsonb_agg(jsonb_build_object('operation', given.o, 'attempt', request->'attempt' || jsonb_build_object(
               'id', nextval('ledger_attempt_id_seq'), 'operation_id', given.o->'id',
               'number', (given.o->>'fencing_token')::bigint + 1,
               'fencing_token', (given.o->>'fencing_token')::bigint + 1,
               'external_id', given.o->'external_id', 'config_version_id', given.o->'config_version_id'))
           ORDER BY given.n)
    INTO held
    FROM jsonb_array_elements(request->'operations') WITH ORDINALITY AS given(o, n);
    INSERT INTO ledger_attempt
    SELECT r.* FROM jsonb_array_elements(held) AS h(row),
                    LATERAL jsonb_populate_record(NULL::ledger_attempt, h.row->'attempt') r;

    -- One event per operation for the one change a reader can see (the row is never processing
    -- in a committed state), the claim's token in its message, on each workspace's chain in turn
    -- (the chains sorted, as ledger.audit.append takes them, so no two appenders deadlock).
    FOR chain IN SELECT c FROM jsonb_array_elements(request->'chains') AS chains(c) LOOP
        SELECT jsonb_agg(request->'audit' || jsonb_build_object(
                   'workspace_id', h.row->'operation'->'workspace_id', 'operation_id', h.row->'operation'->'id',
                   'kind', 'succeeded', 'from_state', h.row->'operation'->'from_state', 'to_state', 'succeeded',
                   'message', 'claim ' || (h.row->'attempt'->>'fencing_token') || ', finished in it',
                   'attempt_id', h.row->'attempt'->'id') ORDER BY n)
        INTO events
        FROM jsonb_array_elements(held) WITH ORDINALITY AS h(row, n)
        WHERE h.row->'operation'->'workspace_id' = chain->0;
        PERFORM ledger_audit_append((chain->>1)::bigint, (chain->>0)::bigint, events);
    END LOOP;

    RETURN changed;
END
$function$
"""

FINISH_CLAIMED_BEFORE = r"""
CREATE OR REPLACE FUNCTION public.ledger_finish_claimed(request jsonb)
 RETURNS integer
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    at timestamptz := (request->>'now')::timestamptz;
    changed int;
    held jsonb;
    chain jsonb;
    events jsonb;
BEGIN
    UPDATE ledger_operation o
    SET state = 'succeeded', attempts = o.attempts + 1, fencing_token = o.fencing_token + 1,
        result = h.result, external_id = h.external_id, updated_at = at, lease_owner = '',
        lease_expires_at = NULL, next_attempt_at = NULL, last_error_category = '', last_error_message = ''
    FROM jsonb_to_recordset(request->'operations')
         AS h(id bigint, fencing_token bigint, result jsonb, external_id text)
    WHERE o.id = h.id AND o.fencing_token = h.fencing_token AND o.state IN ('pending', 'retrying');
    GET DIAGNOSTICS changed = ROW_COUNT;
    IF changed <> jsonb_array_length(request->'operations') THEN
        RETURN changed;
    END IF;

    -- Each operation with its Attempt (numbered by the claim's new token), in the given order.
    SELECT jsonb_agg(jsonb_build_object('operation', given.o, 'attempt', request->'attempt' || jsonb_build_object(
               'id', nextval('ledger_attempt_id_seq'), 'operation_id', given.o->'id',
               'number', (given.o->>'fencing_token')::bigint + 1,
               'fencing_token', (given.o->>'fencing_token')::bigint + 1,
               'external_id', given.o->'external_id', 'config_version_id', given.o->'config_version_id'))
           ORDER BY given.n)
    INTO held
    FROM jsonb_array_elements(request->'operations') WITH ORDINALITY AS given(o, n);
    INSERT INTO ledger_attempt
    SELECT r.* FROM jsonb_array_elements(held) AS h(row),
                    LATERAL jsonb_populate_record(NULL::ledger_attempt, h.row->'attempt') r;

    -- Two events per operation, claimed then succeeded, on each workspace's chain in turn (the
    -- chains sorted, as ledger.audit.append takes them, so no two appenders deadlock).
    FOR chain IN SELECT c FROM jsonb_array_elements(request->'chains') AS chains(c) LOOP
        SELECT jsonb_agg(event ORDER BY n, step) INTO events FROM (
            SELECT n, 1 AS step, request->'audit' || jsonb_build_object(
                       'workspace_id', h.row->'operation'->'workspace_id', 'operation_id', h.row->'operation'->'id',
                       'kind', 'claimed', 'from_state', h.row->'operation'->'from_state', 'to_state', 'processing',
                       'message', 'claim ' || (h.row->'attempt'->>'fencing_token')) AS event
            FROM jsonb_array_elements(held) WITH ORDINALITY AS h(row, n)
            WHERE h.row->'operation'->'workspace_id' = chain->0
            UNION ALL
            SELECT n, 2, request->'audit' || jsonb_build_object(
                       'workspace_id', h.row->'operation'->'workspace_id', 'operation_id', h.row->'operation'->'id',
                       'kind', 'succeeded', 'from_state', 'processing', 'to_state', 'succeeded',
                       'attempt_id', h.row->'attempt'->'id')
            FROM jsonb_array_elements(held) WITH ORDINALITY AS h(row, n)
            WHERE h.row->'operation'->'workspace_id' = chain->0
        ) chained;
        PERFORM ledger_audit_append((chain->>1)::bigint, (chain->>0)::bigint, events);
    END LOOP;

    RETURN changed;
END
$function$
"""


class Migration(migrations.Migration):
    dependencies = [("ledger", "0043_held_time")]

    operations = [migrations.RunSQL(FINISH_CLAIMED, reverse_sql=FINISH_CLAIMED_BEFORE)]
