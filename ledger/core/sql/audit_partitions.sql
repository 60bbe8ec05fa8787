-- Creates the monthly partitions of the audit trail (ledger_auditevent, range-partitioned by
-- created_at in UTC) for ``months`` months from the one ``first`` falls in, each named
-- ledger_auditevent_pYYYYMM: [{"created": [names], "held_back": [names]}]. A month that has its
-- partition, or that an existing partition (the history of before partitioning) already covers, is
-- passed over; a month some of whose events went to the default partition (no partition was there
-- for them) is held back, not moved: it is named, and its events stay where they are. Each month is
-- its own subtransaction, so a month passed over leaves no table behind.
-- A partition is made as a table and then attached, which takes a SHARE UPDATE EXCLUSIVE lock of the
-- trail (appends and reads go on) rather than the ACCESS EXCLUSIVE lock CREATE ... PARTITION OF takes.
-- It gets the trail's indexes, row triggers and foreign key from the attach, its CHECK constraints
-- from LIKE (the attach requires them: the lane's, since 0065), and its own refusal of TRUNCATE (a
-- statement trigger of the parent does not fire for a TRUNCATE of one partition).
-- Creating a partition takes owning the trail: called by the owner (migrations, manage.py
-- audit_partitions, the bench), and by ledger_audit_partitions_ahead for the serving role.
-- Called by: ledger.core.audit_partitions, ledger_audit_partitions_ahead. Made by migration 0061; the
-- CHECK constraints copied since 0065.

CREATE OR REPLACE FUNCTION public.ledger_audit_partitions(first timestamp with time zone, months integer)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    starts timestamptz;
    name text;
    created jsonb := '[]';
    held_back jsonb := '[]';
BEGIN
    IF months IS NULL OR months < 1 OR months > 240 THEN
        RAISE EXCEPTION 'ledger_audit_partitions: months must be 1 to 240, not %', months;
    END IF;
    -- One creator at a time: two sweeps would both find a month missing.
    PERFORM pg_advisory_xact_lock(x'41554450'::bigint << 32);
    FOR step IN 0 .. months - 1 LOOP
        starts := date_trunc('month', first, 'UTC') + make_interval(months => step);
        name := 'ledger_auditevent_p' || to_char(starts AT TIME ZONE 'UTC', 'YYYYMM');
        CONTINUE WHEN to_regclass(name) IS NOT NULL;
        BEGIN
            EXECUTE format('CREATE TABLE %I (LIKE ledger_auditevent INCLUDING CONSTRAINTS)', name);
            EXECUTE format('CREATE TRIGGER ledger_auditevent_no_truncate BEFORE TRUNCATE ON %I '
                           'FOR EACH STATEMENT EXECUTE FUNCTION ledger_audit_no_truncate()', name);
            EXECUTE format('ALTER TABLE ledger_auditevent ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                           name, starts, starts + interval '1 month');
            created := created || to_jsonb(name);
        EXCEPTION
            WHEN invalid_object_definition THEN  -- "would overlap": the history covers the month
                NULL;
            WHEN check_violation THEN  -- the default partition holds events of the month
                held_back := held_back || to_jsonb(name);
        END;
    END LOOP;
    RETURN jsonb_build_object('created', created, 'held_back', held_back);
END
$function$;
