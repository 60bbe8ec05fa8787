"""``ledger_reserve_one``: what ``ledger_reserve`` (0009) does, for a request of one event and no
refused delivery, the shape of nearly every request (a single POST, one event from the command line).

``ledger_reserve`` is set-based so that a batch of 500 costs a handful of statements; one event
pays for that shape: eleven statements, CTEs whose plans open the conflict and contribution tables
and their indexes even when nothing goes there, aggregations into arrays and back, and a catalog
lookup for each of five sequences. Timed on this machine (bench/ and docs/performance.md), one
new event took ~0.88 ms a call in autocommit, against ~0.65 ms here: plain statements, one per row
written, the sequences named as Django names them (``<table>_id_seq``) and resolved once per plan.

The request and the answer are those of ``ledger_reserve``, and so are the rules: the key read
first (a duplicate reserves nothing), else ``INSERT .. ON CONFLICT DO NOTHING`` decides who
reserves it (DESIGN.md rule 2), a loser reading the winner's row in a statement of its own; the
delivery final from the start; the conflict with its differences; the person behind a new
operation; the audit event on the workspace's chain; the coalesced wake-up.
tests/ledger/test_reserve_one.py holds the two functions to the same rows.

The wake-up is one function both call, ``ledger_take_wakeup`` (``ledger_reserve`` is made again
from 0009's text with its own copy of those steps replaced by the call; a call costs nothing
measurable, unlike ``ledger_audit_append``'s, which is why the audit chain stays written in each).
"""

import importlib

from django.db import migrations

_RESERVE_MADE_IN = importlib.import_module("ledger.migrations.0009_reserve_in_database")

# ledger.nudges.request_processing in SQL: a pending wake-up is kept, KEY SHARE-locked until the
# caller commits (the task that takes it waits, then claims what the caller wrote); else the
# caller's is it. True when the caller took it (and so enqueues a task after its commit).
TAKE_WAKEUP = """
CREATE OR REPLACE FUNCTION ledger_take_wakeup(at timestamptz) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
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
$$;
"""

# ledger_reserve (0009) with its steps of the wake-up, from its test of ``accepted`` to its RETURN,
# replaced by the call.
_WAKEUP_FROM = _RESERVE_MADE_IN.RESERVE.index("    IF accepted > 0 THEN\n")
_WAKEUP_TO = _RESERVE_MADE_IN.RESERVE.index("    RETURN jsonb_build_object('wake', wake,")
RESERVE = (_RESERVE_MADE_IN.RESERVE[:_WAKEUP_FROM]
           + "    IF accepted > 0 THEN\n        wake := ledger_take_wakeup((request->>'now')::timestamptz);\n    END IF;\n\n"
           + _RESERVE_MADE_IN.RESERVE[_WAKEUP_TO:])
# CREATE OR REPLACE resets a function's settings: 0022's is set again after each.
GENERIC_PLANS = "ALTER FUNCTION ledger_reserve(jsonb) SET plan_cache_mode = force_generic_plan"

RESERVE_ONE = """
CREATE OR REPLACE FUNCTION ledger_reserve_one(request jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    workspace bigint := (request->>'workspace_id')::bigint;
    incoming jsonb := request->'events'->0->'operation';
    operation ledger_operation;
    created boolean := false;
    outcome text;
    delivery_id bigint := nextval('ledger_delivery_id_seq');
    differences jsonb;
    conflict jsonb;
    message text;
    previous text;
    audit jsonb;
    wake boolean := false;
BEGIN
    SELECT * INTO operation FROM ledger_operation WHERE workspace_id = workspace AND key = incoming->>'key';
    IF NOT FOUND THEN
        INSERT INTO ledger_operation
        SELECT r.* FROM jsonb_populate_record(NULL::ledger_operation, request->'operation' || incoming
                                              || jsonb_build_object('id', nextval('ledger_operation_id_seq'))) r
        ON CONFLICT ON CONSTRAINT operation_unique_key DO NOTHING
        RETURNING * INTO operation;
        created := FOUND;
        IF NOT created THEN
            -- Reserved by another transaction since the read above (the INSERT waited for its
            -- commit): a statement of its own sees that commit.
            SELECT * INTO operation FROM ledger_operation WHERE workspace_id = workspace AND key = incoming->>'key';
        END IF;
    END IF;
    outcome := CASE WHEN created THEN 'accepted'
                    WHEN operation.fingerprint = incoming->>'fingerprint' THEN 'duplicate'
                    ELSE 'conflict' END;

    INSERT INTO ledger_delivery
    SELECT r.* FROM jsonb_populate_record(NULL::ledger_delivery,
        request->'delivery' || (request->'events'->0->'delivery') || jsonb_build_object(
            'action', incoming->'action', 'key', incoming->'key', 'correlation_id', incoming->'correlation_id',
            'id', delivery_id, 'operation_id', operation.id, 'outcome', outcome)) r;

    IF outcome = 'conflict' THEN
        SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'field', name, 'recorded', coalesce(operation.payload->name, 'null'),
                   'incoming', coalesce(incoming->'payload'->name, 'null')) ORDER BY n), '[]')
        INTO differences
        FROM jsonb_array_elements_text(request->'fingerprint_fields'->(incoming->>'action'))
             WITH ORDINALITY AS names(name, n)
        WHERE (operation.payload->name) IS DISTINCT FROM (incoming->'payload'->name);
        conflict := request->'conflict' || jsonb_build_object(
            'id', nextval('ledger_conflict_id_seq'), 'operation_id', operation.id, 'delivery_id', delivery_id,
            'incoming_fingerprint', incoming->'fingerprint', 'incoming_payload', incoming->'payload',
            'differences', differences);
        INSERT INTO ledger_conflict SELECT r.* FROM jsonb_populate_record(NULL::ledger_conflict, conflict) r;
        message := 'conflict ' || (conflict->>'id') || ': '
                   || coalesce((SELECT string_agg(d->>'field', ', ') FROM jsonb_array_elements(differences) AS ds(d)), '')
                   || ' differ';
    ELSE
        message := 'delivery ' || delivery_id || ' via ' || (request->>'source');
    END IF;

    IF created AND request->'contribution' <> 'null' THEN
        INSERT INTO ledger_contribution
        SELECT r.* FROM jsonb_populate_record(NULL::ledger_contribution, request->'contribution'
            || jsonb_build_object('id', nextval('ledger_contribution_id_seq'), 'operation_id', operation.id)) r;
    END IF;

    -- The audit chain, as in ledger_reserve: locked until the commit, then its head read in a
    -- statement of its own (it sees what the lock's previous holder committed). Written here
    -- rather than by calling ledger_audit_append, which cost ~90 µs more for one event.
    PERFORM pg_advisory_xact_lock((request->>'chain_lock')::bigint);
    SELECT hash INTO previous FROM ledger_auditevent
    WHERE workspace_id = workspace AND hash <> '' ORDER BY id DESC LIMIT 1;
    audit := request->'audit' || jsonb_build_object(
        'operation_id', operation.id,
        'kind', CASE outcome WHEN 'accepted' THEN 'reserved' WHEN 'duplicate' THEN 'duplicate_delivery'
                             ELSE 'conflict_detected' END,
        'to_state', CASE WHEN created THEN operation.state ELSE '' END,
        'message', left(message, 500),
        'id', nextval('ledger_auditevent_id_seq'), 'prev_hash', coalesce(previous, ''));
    audit := audit || jsonb_build_object('hash', ledger_audit_hash(audit));
    INSERT INTO ledger_auditevent SELECT r.* FROM jsonb_populate_record(NULL::ledger_auditevent, audit) r;

    IF created THEN
        wake := ledger_take_wakeup((request->>'now')::timestamptz);
    END IF;

    RETURN jsonb_build_object(
        'wake', wake, 'operations', jsonb_build_object(operation.key, to_jsonb(operation)),
        'results', jsonb_build_array(jsonb_build_object('outcome', outcome, 'key', operation.key, 'conflict', conflict)));
END
$$;
"""


def create_functions(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in (TAKE_WAKEUP, RESERVE_ONE, RESERVE, GENERIC_PLANS):
            schema_editor.execute(statement, params=None)


def drop_functions(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in (_RESERVE_MADE_IN.RESERVE, GENERIC_PLANS, "DROP FUNCTION IF EXISTS ledger_reserve_one(jsonb)",
                          "DROP FUNCTION IF EXISTS ledger_take_wakeup(timestamptz)"):
            schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0023_drop_audit_locked_head")]

    operations = [migrations.RunPython(create_functions, drop_functions, elidable=False)]
