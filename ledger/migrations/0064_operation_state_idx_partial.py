"""``operation_due_idx`` (state, next_attempt_at), which held every operation, replaced by
``operation_state_idx``: the same columns, without the succeeded operations. Nearly every row of
the table is succeeded and no query reads them by state (a list or count of the succeeded ones
reads the table, as it did: the index held 87 % of its rows under that one key); every reader of
the old index (the sweep's expired leases, the console queue's counts per state, /metrics'
unfinished operations, a list of one state) reads the new one with the same plan, at a third of
its size (docs/performance.md). An operation's move to succeeded, which every finished try makes,
writes one index entry fewer. Built and dropped CONCURRENTLY on PostgreSQL (hence not atomic): the
new index exists before the old one goes.
"""

from django.db import migrations, models

from ledger.migration_helpers import AddIndexConcurrentlyOnPostgres, RemoveIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0063_claim_created_claimed"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="operation",
            index=models.Index(
                condition=models.Q(("state", "succeeded"), _negated=True),
                fields=["state", "next_attempt_at"],
                name="operation_state_idx",
            ),
        ),
        RemoveIndexConcurrentlyOnPostgres(model_name="operation", name="operation_due_idx"),
    ]
