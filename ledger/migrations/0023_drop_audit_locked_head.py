"""``ledger_audit_locked_head`` (0008) is no longer called: ``ledger.audit.append`` locks the chain and
reads its head inside ``ledger_audit_append`` (0021). Dropped, so the database holds no function
nothing uses; unapplying this migration makes it again, from its text as 0008 made it (a copy: a
migration imports no other)."""

from django.db import migrations

# ledger_audit_locked_head as 0008 made it, for unapplying this migration.
LOCKED_HEAD = """
CREATE OR REPLACE FUNCTION ledger_audit_locked_head(lock_key bigint, chain bigint) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(lock_key);
    IF chain IS NULL THEN
        RETURN (SELECT hash FROM ledger_auditevent WHERE workspace_id IS NULL AND hash <> ''
                ORDER BY id DESC LIMIT 1);
    END IF;
    RETURN (SELECT hash FROM ledger_auditevent WHERE workspace_id = chain AND hash <> ''
            ORDER BY id DESC LIMIT 1);
END
$$;
"""


def drop_locked_head(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS ledger_audit_locked_head(bigint, bigint)", params=None)


def create_locked_head(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(LOCKED_HEAD, params=None)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0022_generic_plans")]

    operations = [
        migrations.RunPython(drop_locked_head, create_locked_head, elidable=False),
    ]
