"""The claim's index (the drain at volume): operation_claim_idx (id) on the claimable
operations (pending, retrying).

A claim takes the first due operations by id. Without this index PostgreSQL either sorted every
due row (with no statistics, as here with autovacuum off: 20 ms a claim behind a backlog of 20,000,
the sort spilling to disk) or, with statistics, walked the primary key through every finished
operation older than the backlog (77 ms a claim behind 300,000 of them). Along this index a claim
of 200 costs ~0.25 ms whatever lies before it. ``ledger.processing`` plans the claim without an
explicit sort, so that the index is the cheapest order whatever the statistics say.

Built CONCURRENTLY on PostgreSQL, like 0007 and 0020 (hence not atomic).
"""

from django.db import migrations, models

from ledger.migration_helpers import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0024_reserve_one_event"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="operation",
            index=models.Index(condition=models.Q(state__in=["pending", "retrying"]), fields=["id"],
                               name="operation_claim_idx"),
        ),
    ]
