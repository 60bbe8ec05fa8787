"""The record of a month of the audit trail archived to a file (``AuditArchive``), kept as written:
its triggers refuse UPDATE, DELETE and TRUNCATE as the installation record's do."""

from django.db import migrations, models

FIXED = (
    "CREATE TRIGGER ledger_auditarchive_fixed BEFORE DELETE OR UPDATE ON public.ledger_auditarchive "
    "FOR EACH ROW EXECUTE FUNCTION ledger_audit_append_only()"
)
NO_TRUNCATE = (
    "CREATE TRIGGER ledger_auditarchive_no_truncate BEFORE TRUNCATE ON public.ledger_auditarchive "
    "FOR EACH STATEMENT EXECUTE FUNCTION ledger_audit_no_truncate()"
)


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0061_partitioned_audit_trail"),
    ]

    operations = [
        migrations.CreateModel(
            name="AuditArchive",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("partition", models.CharField(max_length=63, unique=True)),
                ("starts", models.DateTimeField(blank=True, null=True)),
                ("ends", models.DateTimeField()),
                ("events", models.BigIntegerField()),
                ("chains", models.JSONField()),
                ("file_name", models.CharField(max_length=255)),
                ("file_sha256", models.CharField(max_length=64)),
                ("key_id", models.CharField(max_length=16)),
                ("mac", models.CharField(max_length=64)),
                ("archived_at", models.DateTimeField()),
            ],
            options={
                "ordering": ["ends"],
            },
        ),
        migrations.RunSQL(
            [FIXED, NO_TRUNCATE],
            reverse_sql=[
                "DROP TRIGGER ledger_auditarchive_no_truncate ON ledger_auditarchive",
                "DROP TRIGGER ledger_auditarchive_fixed ON ledger_auditarchive",
            ],
        ),
    ]
