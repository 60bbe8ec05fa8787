"""``ledger_finish_claimed``: the bookkeeping of a set of internal operations finished in their
claim (``ledger.successes.record_claimed_successes``), in one statement on PostgreSQL.

In the claim's transaction, after the action's effects were written: one guarded UPDATE moves each
row from pending (or retrying) to succeeded under the claim's token (old + 1), then the ok Attempts
and the ``claimed`` and ``succeeded`` audit events go in, the events appended to each workspace's
chain by ``ledger_audit_append`` (0021). It returns how many rows it moved: if any row was not
claimable under its token, nothing else is written and the caller's savepoint undoes the set.

Python built the same rows as model instances before (an Attempt and two AuditEvents per
operation, Django compiling each insert, each value quoted): about half of a drained operation's
CPU. Here Python sends one row template per table (``ledger.rows.model_row``, so a column added
later reaches the table without a change here) and a few values per operation. The states and
kinds are the ones ``ledger.states`` and ``recording`` name; tests/ledger/engine/test_finish_claimed.py
holds this function to the rows the Python path writes.
"""

from django.db import migrations

FINISH_CLAIMED = """
CREATE OR REPLACE FUNCTION ledger_finish_claimed(request jsonb) RETURNS int
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan AS $$
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
$$;
"""


def create_function(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FINISH_CLAIMED, params=None)


def drop_function(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS ledger_finish_claimed(jsonb)", params=None)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0028_announce_tasks")]

    operations = [migrations.RunPython(create_function, drop_function, elidable=False)]
