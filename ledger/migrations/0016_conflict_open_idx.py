"""A partial index on the open conflicts (the conflicts inbox groups them by operation; the queue
counts them). Non-atomic, so that PostgreSQL builds it with CREATE INDEX CONCURRENTLY and intake
keeps writing conflicts meanwhile, as in 0007_scale_indexes. If a concurrent build fails it leaves an
INVALID index: drop it, then migrate again."""

from django.db import migrations, models
from django.db.models import Q


class AddIndexConcurrentlyOnPostgres(migrations.AddIndex):
    """AddIndex, built CONCURRENTLY on PostgreSQL (the migration must not be atomic)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.add_index(model, self.index, **_concurrently(schema_editor))

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.remove_index(model, self.index, **_concurrently(schema_editor))


def _concurrently(schema_editor) -> dict:
    return {"concurrently": True} if schema_editor.connection.vendor == "postgresql" else {}


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
