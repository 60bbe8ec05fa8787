"""Deliveries and attempts range-partitioned by their operation's id, so that retention drops the
rows of a range of operations past their key window as a whole (``DETACH`` and ``DROP``: no row
deleted, no dead tuple) instead of deleting them one by one (docs/retention.md, "Ranges of
operations").

- By the operation, not by month: an attempt's one-per-claim key (operation, fencing token) holds
  the partition's column, so the database still refuses a second try under one claim, and every
  row of an operation is in one partition, that of its range, whatever months it spans.
- ``ledger_attempt``'s primary key is (id, operation_id), as PostgreSQL requires of a partitioned
  table. A refused delivery has no operation, so ``ledger_delivery`` has no primary key: (id,
  operation_id) is unique, and a conflict names its delivery by both (its operation is its
  delivery's: the intake writes both with the same one), so the database still refuses a conflict
  naming another operation's delivery or one that is gone. Ids still come from the tables'
  sequences (now plain sequences of the same names).
- Nothing is copied: each table becomes its partition ``<table>_history``, for every operation made
  so far (an empty one, ending at 0, on a new installation); its refused deliveries move to the
  default partition, which takes whatever has no operation or an operation no range has yet.
- The ranges are 1,000,000 operation ids wide (``ledger_operation_partitions``), made two ahead
  of the newest operation now and by the sweep from then on (``ledger_operation_partitions_ahead``,
  SECURITY DEFINER: the serving role owns nothing); ``ledger_drop_operation_range`` drops one.

Unapplying makes plain tables of the partitions' rows again (copied).
"""

from django.db import migrations, models

FUNCTIONS = [
    r"""
CREATE OR REPLACE FUNCTION public.ledger_operation_partitions(width bigint, upto bigint)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    tables constant text[] := ARRAY['ledger_delivery', 'ledger_attempt'];
    top bigint;
    starts bigint;
    made integer := 0;
    base text;
    name text;
    created jsonb := '[]';
    held_back jsonb := '[]';
BEGIN
    IF width IS NULL OR width < 1000 THEN
        RAISE EXCEPTION 'ledger_operation_partitions: width must be at least 1000 operations, not %', width;
    END IF;
    -- One maker at a time: two sweeps would both find a range missing.
    PERFORM pg_advisory_xact_lock(x'4f505250'::bigint << 32);
    -- The ranges go on from the top of the highest one (the history's, or the last made), or from
    -- 0 on a new installation; the deliveries' and the attempts' are made together.
    SELECT max((regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''(\d+)''\)'))[1]::bigint) INTO top
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'ledger_attempt'::regclass;
    starts := coalesce(top, 0);
    WHILE starts < upto AND made < 100 LOOP
        FOREACH base IN ARRAY tables LOOP
            name := base || '_ops_' || starts;
            BEGIN
                EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name, base);
                -- ATTACH, not CREATE .. PARTITION OF: it holds the table with SHARE UPDATE EXCLUSIVE,
                -- so readers and writers go on.
                EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                               base, name, starts, starts + width);
                created := created || to_jsonb(name);
            EXCEPTION
                WHEN check_violation THEN  -- the default partition holds rows of the range
                    held_back := held_back || to_jsonb(name);
            END;
        END LOOP;
        starts := starts + width;
        made := made + 1;
    END LOOP;
    RETURN jsonb_build_object('created', created, 'held_back', held_back);
END
$function$
""",
    r"""
CREATE OR REPLACE FUNCTION public.ledger_operation_partitions_ahead()
 RETURNS jsonb
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
    WITH newest AS (
        SELECT (bounds[2]::bigint - bounds[1]::bigint) AS width
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
             regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''(\d+)''\) TO \(''(\d+)''\)') AS bounds
        WHERE i.inhparent = 'ledger_attempt'::regclass AND bounds IS NOT NULL
        ORDER BY bounds[2]::bigint DESC LIMIT 1
    ), sized AS (SELECT coalesce((SELECT width FROM newest), 1000000) AS width)
    SELECT ledger_operation_partitions(width, (SELECT last_value FROM ledger_operation_id_seq) + 2 * width)
    FROM sized
$function$
""",
    r"""
CREATE OR REPLACE FUNCTION public.ledger_drop_operation_range(first bigint)
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
DECLARE
    parts text[];
    ends bigint;
    part text;
BEGIN
    SELECT array_agg(c.relname::text ORDER BY c.relname), max(bounds[2]::bigint) INTO parts, ends
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
         regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''(\d+)''\) TO \(''(\d+)''\)') AS bounds
    WHERE i.inhparent IN ('ledger_delivery'::regclass, 'ledger_attempt'::regclass) AND bounds[1]::bigint = first;
    IF coalesce(array_length(parts, 1), 0) <> 2 THEN
        RAISE EXCEPTION 'no range of operations begins at %', first USING ERRCODE = 'undefined_table';
    END IF;
    IF ends - 1 > (SELECT last_value FROM ledger_operation_id_seq) THEN
        RAISE EXCEPTION 'operations % to % are not all made yet: the range stays', first, ends - 1
            USING ERRCODE = 'object_in_use';
    END IF;
    -- Held before looking (SHARE: read on, not written): no delivery or attempt arrives in them
    -- while the range's operations are read. A reader of the tables holds the detach up: it waits
    -- 5 s at most for its locks, then the next run tries again.
    PERFORM set_config('lock_timeout', '5s', true);
    EXECUTE format('LOCK TABLE %I, %I IN SHARE MODE', parts[1], parts[2]);
    IF EXISTS (SELECT 1 FROM ledger_operation WHERE id >= first AND id < ends
               AND state NOT IN ('cancelled', 'rejected', 'succeeded', 'superseded')) THEN
        RAISE EXCEPTION 'operations % to % are not all finished: the range stays', first, ends - 1
            USING ERRCODE = 'object_in_use';
    END IF;
    -- Detaching a range of deliveries a conflict still names fails (its foreign key): deleted first.
    FOREACH part IN ARRAY parts LOOP
        EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', split_part(part, '_ops_', 1), part);
        EXECUTE format('DROP TABLE %I', part);
    END LOOP;
    RETURN to_jsonb(parts);
END
$function$
""",
]

CONVERT = r"""
CREATE FUNCTION pg_temp.partition_by_operation(tab text, upto bigint) RETURNS void LANGUAGE plpgsql AS $partition$
DECLARE
    history text := tab || '_history';
    sequence_at record;
    index_definitions text[];
    constraint_definitions text[];
    definition text;
    item record;
BEGIN
    EXECUTE format('SELECT last_value, is_called FROM %I', tab || '_id_seq') INTO sequence_at;
    -- What the table has besides its primary key: indexes of their own, then constraints (checks
    -- come with LIKE; foreign keys and unique constraints are made again, by name).
    index_definitions := ARRAY(
        SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i
        WHERE i.indrelid = tab::regclass AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
        ORDER BY i.indexrelid);
    constraint_definitions := ARRAY(
        SELECT format('ALTER TABLE %I ADD CONSTRAINT %I %s', tab, conname, pg_get_constraintdef(oid))
        FROM pg_constraint WHERE conrelid = tab::regclass AND contype IN ('f', 'u') ORDER BY conname);
    EXECUTE format('ALTER TABLE %I RENAME TO %I', tab, history);
    EXECUTE format('ALTER TABLE %I RENAME CONSTRAINT %I TO %I', history, tab || '_pkey', history || '_pkey');
    -- The identity's sequence goes with the identity: a plain one of the same name takes over.
    EXECUTE format('ALTER TABLE %I ALTER COLUMN id DROP IDENTITY', history);
    EXECUTE format('CREATE SEQUENCE %I', tab || '_id_seq');
    PERFORM setval(tab || '_id_seq', sequence_at.last_value, sequence_at.is_called);
    -- Its unique constraints step aside for the table's of the same name, which take them (and
    -- their indexes) as their parts when it is attached; so do its foreign keys, unrenamed.
    FOR item IN SELECT conname FROM pg_constraint WHERE conrelid = history::regclass AND contype = 'u' LOOP
        EXECUTE format('ALTER TABLE %I RENAME CONSTRAINT %I TO %I', history, item.conname, left(item.conname, 50) || '_history');
    END LOOP;

    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (operation_id)', tab, history);
    EXECUTE format('ALTER TABLE %I ALTER COLUMN id SET DEFAULT nextval(%L)', tab, tab || '_id_seq');
    EXECUTE format('ALTER SEQUENCE %I OWNED BY %I.id', tab || '_id_seq', tab);
    -- A partitioned table's keys hold the partition's column. An attempt always has its operation;
    -- a refused delivery has none, so the deliveries' (id, operation_id) is unique but no key.
    IF tab = 'ledger_attempt' THEN
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY (id, operation_id)', tab, tab || '_pkey');
    ELSE
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I UNIQUE (id, operation_id)', tab, tab || '_id_operation_key');
    END IF;
    FOREACH definition IN ARRAY constraint_definitions LOOP
        EXECUTE definition;
    END LOOP;
    -- What has no operation (a refused delivery) or an operation no range has yet.
    EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', tab || '_default', tab);

    EXECUTE format('INSERT INTO %I SELECT * FROM %I WHERE operation_id IS NULL', tab || '_default', history);
    EXECUTE format('DELETE FROM %I WHERE operation_id IS NULL', history);
    -- Their foreign keys checked now, not at the commit: a table with checks pending takes no index.
    SET CONSTRAINTS ALL IMMEDIATE;
    -- Its key on id alone gives way to the table's (built by the attach).
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', history, history || '_pkey');
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)', tab, history, upto);
    FOREACH definition IN ARRAY index_definitions LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', (regexp_match(definition, '^CREATE INDEX (\S+) '))[1],
                       left((regexp_match(definition, '^CREATE INDEX (\S+) '))[1], 50) || '_history');
    END LOOP;
    FOREACH definition IN ARRAY index_definitions LOOP
        EXECUTE replace(definition, format(' ON public.%s ', history), format(' ON public.%s ', tab));
    END LOOP;
END
$partition$;

DO $convert$
DECLARE
    width constant bigint := 1000000;
    next_operation bigint := (SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM ledger_operation_id_seq);
    -- The history holds the rows of every operation made so far (none on a new installation), and
    -- ends where the ranges begin.
    upto bigint := CASE WHEN EXISTS (SELECT 1 FROM ledger_operation) THEN (next_operation - 1) / width + 1
                        ELSE next_operation / width END * width;
BEGIN
    ALTER TABLE ledger_conflict DROP CONSTRAINT ledger_conflict_delivery_id_f4d6160c_fk_ledger_delivery_id;
    PERFORM pg_temp.partition_by_operation('ledger_delivery', upto);
    PERFORM pg_temp.partition_by_operation('ledger_attempt', upto);
    -- A conflict's delivery is one of its operation's (the intake writes both with the same one).
    ALTER TABLE ledger_conflict ADD CONSTRAINT ledger_conflict_delivery_fk FOREIGN KEY (delivery_id, operation_id)
        REFERENCES ledger_delivery (id, operation_id) DEFERRABLE INITIALLY DEFERRED;
    PERFORM ledger_operation_partitions(width, next_operation + 2 * width);
END
$convert$;
DROP FUNCTION pg_temp.partition_by_operation(text, bigint);
"""

REVERT = r"""
CREATE FUNCTION pg_temp.unpartition(tab text) RETURNS void LANGUAGE plpgsql AS $unpartition$
DECLARE
    plain text := tab || '_plain';
    sequence_at record;
    index_definitions text[];
    constraint_definitions text[];
    definition text;
BEGIN
    EXECUTE format('SELECT last_value, is_called FROM %I', tab || '_id_seq') INTO sequence_at;
    index_definitions := ARRAY(
        SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i
        WHERE i.indrelid = tab::regclass AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
        ORDER BY i.indexrelid);
    constraint_definitions := ARRAY(
        SELECT format('ALTER TABLE %I ADD CONSTRAINT %I %s', tab, conname, pg_get_constraintdef(oid))
        FROM pg_constraint WHERE conrelid = tab::regclass AND contype IN ('f', 'u')
        AND conname <> tab || '_id_operation_key' ORDER BY conname);
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', plain, tab);
    EXECUTE format('ALTER TABLE %I ALTER COLUMN id DROP DEFAULT', plain);
    EXECUTE format('INSERT INTO %I SELECT * FROM %I', plain, tab);
    EXECUTE format('DROP TABLE %I', tab);  -- its partitions and its sequence with it
    EXECUTE format('ALTER TABLE %I RENAME TO %I', plain, tab);
    EXECUTE format('ALTER TABLE %I ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (SEQUENCE NAME %I)', tab, tab || '_id_seq');
    PERFORM setval(tab || '_id_seq', sequence_at.last_value, sequence_at.is_called);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY (id)', tab, tab || '_pkey');
    FOREACH definition IN ARRAY constraint_definitions LOOP
        EXECUTE definition;
    END LOOP;
    FOREACH definition IN ARRAY index_definitions LOOP
        EXECUTE replace(definition, format(' ON ONLY public.%s ', tab), format(' ON public.%s ', tab));
    END LOOP;
END
$unpartition$;

ALTER TABLE ledger_conflict DROP CONSTRAINT ledger_conflict_delivery_fk;
SELECT pg_temp.unpartition('ledger_delivery');
SELECT pg_temp.unpartition('ledger_attempt');
ALTER TABLE ledger_conflict ADD CONSTRAINT ledger_conflict_delivery_id_f4d6160c_fk_ledger_delivery_id
    FOREIGN KEY (delivery_id) REFERENCES ledger_delivery (id) DEFERRABLE INITIALLY DEFERRED;
DROP FUNCTION pg_temp.unpartition(text);
"""


class Migration(migrations.Migration):
    dependencies = [("ledger", "0067_attempt_outcome_idx")]

    operations = [
        migrations.RunSQL(
            FUNCTIONS,
            reverse_sql=[
                "DROP FUNCTION public.ledger_drop_operation_range(bigint)",
                "DROP FUNCTION public.ledger_operation_partitions_ahead()",
                "DROP FUNCTION public.ledger_operation_partitions(bigint, bigint)",
            ],
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(CONVERT, reverse_sql=REVERT)],
            # The conflict's foreign key is on (delivery_id, operation_id), made in CONVERT.
            state_operations=[
                migrations.AlterField(
                    model_name="conflict",
                    name="delivery",
                    field=models.OneToOneField(
                        db_constraint=False,
                        on_delete=models.deletion.PROTECT,
                        related_name="conflict",
                        to="ledger.delivery",
                    ),
                ),
            ],
        ),
    ]
