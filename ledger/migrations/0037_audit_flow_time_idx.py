"""The dashboard's live last hour: ``audit_flow_time_idx`` (created_at, id) on the audit
events it counts, an attempt that ended (out of ``processing``) or an operation that reached a final
state. The dashboard reads the newest entries of it, at most 10,001, whatever else the trail holds
in the hour (claims, arrivals, duplicate deliveries); the sweep's samples read their intervals
from it too. Partial: about one event in three is in it. Built CONCURRENTLY on PostgreSQL, like
0026 (hence not atomic): the audit trail is the largest table.
"""

from django.db import migrations, models

from ledger.migration_helpers import AddIndexConcurrentlyOnPostgres

FINAL = ["succeeded", "rejected", "cancelled", "superseded"]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0036_attempt_answers"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="auditevent",
            index=models.Index(
                condition=models.Q(("from_state", "processing"), ("to_state__in", FINAL), _connector="OR"),
                fields=["created_at", "id"],
                name="audit_flow_time_idx",
            ),
        ),
    ]
