"""A partial index on the open conflicts (the conflicts inbox groups them by operation; the queue
counts them). Non-atomic, so that PostgreSQL builds it with CREATE INDEX CONCURRENTLY and intake
keeps writing conflicts meanwhile, as in 0007_scale_indexes. If a concurrent build fails it leaves an
INVALID index: drop it, then migrate again."""

from django.db import migrations, models
from django.db.models import Q

from ledger.migration_helpers import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0015_tallies"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="conflict",
            index=models.Index(fields=["operation", "id"], name="conflict_open_idx", condition=Q(status="open")),
        ),
    ]
