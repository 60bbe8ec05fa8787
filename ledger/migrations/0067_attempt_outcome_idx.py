"""``attempt_not_ok_idx`` (id), the attempts that were not ok, replaced by ``attempt_outcome_idx``
(outcome, id) on the same rows. The admin's outcome filter reads one outcome newest first: through
the old index it walked every attempt that was not ok and read each one's row for its outcome (an
outcome no attempt has, all of them: 356 ms at 5,000,000 operations, docs/performance.md); through
the new one it reads that outcome's range alone. The same rows, so a write pays what it did. Built
and dropped CONCURRENTLY on PostgreSQL (hence not atomic): the new index exists before the old one
goes.
"""

from django.db import migrations, models

from ledger.migration_helpers import AddIndexConcurrentlyOnPostgres, RemoveIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0066_chain_head_by_its_index"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="attempt",
            index=models.Index(
                condition=models.Q(("outcome__in", ["", "ok"]), _negated=True),
                fields=["outcome", "id"],
                name="attempt_outcome_idx",
            ),
        ),
        RemoveIndexConcurrentlyOnPostgres(model_name="attempt", name="attempt_not_ok_idx"),
    ]
