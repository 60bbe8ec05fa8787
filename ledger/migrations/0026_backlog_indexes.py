"""Reads of a large backlog along indexes (issue 8, the console at volume): a day's arrivals
waiting (after a long pause, or an outage of the workers) must not make the console's pages read
all of them.

- ``operation_claim_order_idx`` (created_at, id) on the claimable operations (pending, retrying)
  replaces 0025's ``operation_claim_idx`` (id). The claim now takes the first due operations in
  arrival order, ``created_at`` then ``id`` (as before, in effect: ids are given in arrival order),
  and the same index gives the age of the oldest due operation (the queue page, the dashboard, the
  metrics, the sweep's report) by reading its first entries. Before, that read every due row and
  sorted them: 107 ms behind a backlog of 330,000.
- ``operation_unfinished_idx`` (action, created_at, id) on the unfinished operations: per action,
  the service-levels page counts those past a time (at risk, late) and lists the oldest, by
  reading a range of it. Before, it read every unfinished operation of the action: 770 ms behind
  the same backlog.

Both partial: an operation leaves them when it finishes, so the finished rows (nearly all of them)
cost them nothing, and a claim that finishes an internal set writes no entry in either. Built and
dropped CONCURRENTLY on PostgreSQL, like 0007, 0020 and 0025 (hence not atomic): the new claim
index exists before the old one goes.
"""

import importlib

from django.db import migrations, models

_SCALE_INDEXES = importlib.import_module("ledger.migrations.0007_scale_indexes")
AddIndexConcurrentlyOnPostgres, _concurrently = _SCALE_INDEXES.AddIndexConcurrentlyOnPostgres, _SCALE_INDEXES._concurrently

UNFINISHED = ["needs_review", "pending", "pending_approval", "processing", "retrying", "unknown"]


class RemoveIndexConcurrentlyOnPostgres(migrations.RemoveIndex):
    """RemoveIndex, dropped CONCURRENTLY on PostgreSQL (the migration must not be atomic)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            index = from_state.models[app_label, self.model_name_lower].get_index_by_name(self.name)
            schema_editor.remove_index(model, index, **_concurrently(schema_editor))

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            index = to_state.models[app_label, self.model_name_lower].get_index_by_name(self.name)
            schema_editor.add_index(model, index, **_concurrently(schema_editor))


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
