"""Reads of a large backlog along indexes (the console at volume): a day's arrivals
waiting (after a long pause, or an outage of the workers) must not make the console's pages read
all of them.

- ``operation_claim_order_idx`` (created_at, id) on the claimable operations (pending, retrying)
  replaces 0025's ``operation_claim_idx`` (id). The claim now takes the first due operations in
  arrival order, ``created_at`` then ``id`` (as before, in effect: ids are given in arrival order),
  and the same index gives the age of the oldest due operation (the queue page, the dashboard, the
  metrics, the sweep's report) by reading its first entries. Before, that read every due row and
  sorted them: 107 ms behind a backlog of 330,000.
- ``operation_unfinished_idx`` (action, created_at, id, workspace) on the unfinished operations:
  per action, the service-levels page counts those past a time (at risk, late) and lists the
  oldest, by reading a range of it (the workspace last, so a member's range is narrowed on the
  index alone). Before, it read every unfinished operation of the action: 770 ms behind
  the same backlog.

Both partial: an operation leaves them when it finishes, so the finished rows (nearly all of them)
cost them nothing, and a claim that finishes an internal set writes no entry in either. Built and
dropped CONCURRENTLY on PostgreSQL, like 0007, 0020 and 0025 (hence not atomic): the new claim
index exists before the old one goes.
"""

from django.db import migrations, models

from ledger.migration_helpers import AddIndexConcurrentlyOnPostgres, RemoveIndexConcurrentlyOnPostgres

UNFINISHED = ["needs_review", "pending", "pending_approval", "processing", "retrying", "unknown"]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0025_claim_index"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="operation",
            index=models.Index(condition=models.Q(state__in=["pending", "retrying"]), fields=["created_at", "id"],
                               name="operation_claim_order_idx"),
        ),
        RemoveIndexConcurrentlyOnPostgres(model_name="operation", name="operation_claim_idx"),
        AddIndexConcurrentlyOnPostgres(
            model_name="operation",
            index=models.Index(condition=models.Q(state__in=UNFINISHED), fields=["action", "created_at", "id", "workspace"],
                               name="operation_unfinished_idx"),
        ),
    ]
