"""The queue's sorts and per-state counts, each read through an index at
1,000,000 operations: partial indexes on the attention states, like operation_attention_idx
(updated_at, id), which keeps serving the default order. Without them PostgreSQL read every row
needing attention and sorted it (145 ms for "oldest first"; a state's rows through
operation_due_idx, then a sort), and counted a filtered state from the table.

- operation_arrival_idx (created_at, id): all attention states by arrival, both ways;
- operation_state_updated_idx / operation_state_arrival_idx (state, time, id): one state in either
  order (the queue then asks for ``state = x`` alone, so the planner estimates it right);
- operation_state_count_idx (state, action, workspace_id): the bounded counts, with the workspace
  and action filters, from the index alone.

Built CONCURRENTLY on PostgreSQL, like 0007 (hence not atomic).
"""

from django.db import migrations, models
from django.db.models import Q

from ledger.migration_helpers import AddIndexConcurrentlyOnPostgres

ATTENTION = Q(state__in=["needs_review", "unknown", "pending_approval"])


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("ledger", "0019_bulk_actions")]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="operation",
            index=models.Index(condition=ATTENTION, fields=["created_at", "id"], name="operation_arrival_idx"),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="operation",
            index=models.Index(condition=ATTENTION, fields=["state", "updated_at", "id"],
                               name="operation_state_updated_idx"),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="operation",
            index=models.Index(condition=ATTENTION, fields=["state", "created_at", "id"],
                               name="operation_state_arrival_idx"),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="operation",
            index=models.Index(condition=ATTENTION, fields=["state", "action", "workspace"],
                               name="operation_state_count_idx"),
        ),
    ]
