"""Audit events are append-only in the database itself, not only in the ORM.

PostgreSQL refuses UPDATE and DELETE by trigger (TRUNCATE, used to reset test databases, stays
possible for the table owner).
"""

from django.db import migrations

POSTGRES_UP = """
CREATE OR REPLACE FUNCTION ledger_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'ledger_auditevent is append-only: % refused', TG_OP;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER ledger_auditevent_append_only
    BEFORE UPDATE OR DELETE ON ledger_auditevent
    FOR EACH ROW EXECUTE FUNCTION ledger_audit_append_only();
"""
POSTGRES_DOWN = """
DROP TRIGGER IF EXISTS ledger_auditevent_append_only ON ledger_auditevent;
DROP FUNCTION IF EXISTS ledger_audit_append_only();
"""


def _run(sql_by_vendor):
    def run(apps, schema_editor):
        sql = sql_by_vendor.get(schema_editor.connection.vendor)
        if sql:
            schema_editor.execute(sql, params=None)
    return run


class Migration(migrations.Migration):
    dependencies = [("ledger", "0001_initial")]

    operations = [
        migrations.RunPython(
            _run({"postgresql": POSTGRES_UP}),
            _run({"postgresql": POSTGRES_DOWN}),
        ),
    ]
