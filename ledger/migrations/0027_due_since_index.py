"""``operation_due_since_idx`` (action, coalesce(next_attempt_at, created_at)) on the claimable
operations (pending, retrying), for /metrics' ``opsconsole_oldest_retryable_age_seconds``
(at volume): per action, how long the longest-waiting due operation has waited, since it arrived or
since the retry it was put off to came due. The first entry of the action's range that is due
answers it; before, a minimum over every due row took 1.5 s a scrape behind a day's backlog of
100,000. Partial, so finished rows cost it nothing. Built CONCURRENTLY on PostgreSQL, like 0026
(hence not atomic).
"""

import django.db.models.functions.comparison
from django.db import migrations, models

from ledger.migration_helpers import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0026_backlog_indexes"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="operation",
            index=models.Index(
                models.F("action"),
                django.db.models.functions.comparison.Coalesce("next_attempt_at", "created_at"),
                condition=models.Q(state__in=["pending", "retrying"]), name="operation_due_since_idx"),
        ),
    ]
