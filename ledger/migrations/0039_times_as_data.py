"""Times as data: a text that mentions a time says ``{name}`` and keeps the time beside it
(``ledger.timed``): ``AuditEvent.times`` and ``Operation.last_error_times``, null for none and for
every row written before.

An audit event's times are covered by its hash: ``ledger_audit_encoding`` appends them, after the
fields it had, only where an event has any, so every event written before hashes to the bytes it did
and every chain still verifies. Adding nullable columns rewrites no row (the audit table's rows,
which its triggers would refuse to update, stay as they are). Reversed: the encoding of 0030, then
the columns dropped (an event with times then no longer verifies: unapply only before any is written).
"""

from django.db import migrations, models

ENCODING = """
CREATE OR REPLACE FUNCTION public.ledger_audit_encoding(event jsonb)
 RETURNS bytea
 LANGUAGE sql
 STABLE
AS $function$
SELECT convert_to(
    ledger_audit_field(event->>'prev_hash') || ledger_audit_field(event->>'workspace_id')
    || ledger_audit_field(event->>'operation_id') || ledger_audit_field(event->>'attempt_id')
    || ledger_audit_field(event->>'actor') || ledger_audit_field(event->>'kind')
    || ledger_audit_field(event->>'from_state') || ledger_audit_field(event->>'to_state')
    || ledger_audit_field(event->>'error_category') || ledger_audit_field(event->>'message')
    || ledger_audit_field((extract(epoch FROM (event->>'created_at')::timestamptz) * 1000000)::bigint::text)
    || CASE WHEN event->>'times' IS NULL THEN '' ELSE ledger_audit_field(event->>'times') END,
    'UTF8')
$function$;
"""

# 0030's, for unapplying (a copy: a migration imports no other).
ENCODING_BEFORE = """
CREATE OR REPLACE FUNCTION public.ledger_audit_encoding(event jsonb)
 RETURNS bytea
 LANGUAGE sql
 STABLE
AS $function$
SELECT convert_to(
    ledger_audit_field(event->>'prev_hash') || ledger_audit_field(event->>'workspace_id')
    || ledger_audit_field(event->>'operation_id') || ledger_audit_field(event->>'attempt_id')
    || ledger_audit_field(event->>'actor') || ledger_audit_field(event->>'kind')
    || ledger_audit_field(event->>'from_state') || ledger_audit_field(event->>'to_state')
    || ledger_audit_field(event->>'error_category') || ledger_audit_field(event->>'message')
    || ledger_audit_field((extract(epoch FROM (event->>'created_at')::timestamptz) * 1000000)::bigint::text),
    'UTF8')
$function$;
"""


def create_encoding(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(ENCODING, params=None)


def restore_encoding(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(ENCODING_BEFORE, params=None)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0038_admin_names")]

    operations = [
        migrations.AddField(
            model_name="auditevent",
            name="times",
            field=models.JSONField(blank=True, default=None, null=True),
        ),
        migrations.AddField(
            model_name="operation",
            name="last_error_times",
            field=models.JSONField(blank=True, default=None, null=True),
        ),
        migrations.RunPython(create_encoding, restore_encoding, elidable=False),
    ]
