"""Taking an operation in the console: who took it and when, and a partial index
for "assigned to me", built CONCURRENTLY (non-atomic) like every index on the operations."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

from ledger.migration_helpers import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0041_http_action_summary"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="operation",
            name="assigned_to",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="operation",
            name="assigned_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="operation",
            index=models.Index(
                condition=models.Q(assigned_to__isnull=False),
                fields=["assigned_to", "updated_at", "id"],
                name="operation_assigned_idx",
            ),
        ),
    ]
