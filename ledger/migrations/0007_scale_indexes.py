"""Indexes for the console and the admin at millions of rows (docs/performance.md, "Console and
admin at scale"): the audit lists newest first, overall, by kind and by actor; the queue's
operations that need a person; the deliveries and attempts worth filtering for (partial: the
common rows are not in them); and, on PostgreSQL only, the search by request id (trigram) and by
the start of the key.

Non-atomic, so that on PostgreSQL every index is built with CREATE INDEX CONCURRENTLY: a plain
CREATE INDEX on a table of millions of audit events would block intake's writes for the whole
build. If a concurrent build fails it leaves an INVALID index: drop it, then migrate again.
"""

from django.contrib.postgres.operations import TrigramExtension
from django.db import migrations, models
from django.db.models import F, Q
from django.db.models.functions import Upper

from ledger.migration_helpers import AddIndexConcurrentlyOnPostgres

# Search by key and request id (console and admin): any part of the request id, through a trigram
# index, and the start of the key, through a pattern btree (a pasted key, or its start; the part of
# a key people type is its request id). A trigram index on the key as well cost intake and every
# transition about 20 us a row, twice the two below together (docs/performance.md).
# Django spells `icontains`/`istartswith` as UPPER(column) LIKE UPPER(pattern), so the indexed
# expression is the same UPPER(...). Outside the model state, PostgreSQL only: SQLite has neither
# operator class, and Meta.indexes must hold on both databases.
SEARCH_INDEXES = {
    "operation_request_id_trgm_idx": "USING gin (UPPER(payload ->> 'request_id') gin_trgm_ops)",
    "operation_key_prefix_idx": "(UPPER(key) text_pattern_ops)",
}


def add_search_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for name, definition in SEARCH_INDEXES.items():
            schema_editor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON ledger_operation {definition}")


def remove_search_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for name in SEARCH_INDEXES:
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("ledger", "0006_memberships")]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="auditevent",
            index=models.Index(fields=["created_at", "id"], name="audit_time_idx"),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="auditevent",
            index=models.Index(fields=["kind", "created_at", "id"], name="audit_kind_time_idx"),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="auditevent",
            index=models.Index(Upper("actor"), F("created_at"), F("id"), name="audit_actor_time_idx"),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="delivery",
            index=models.Index(condition=~Q(outcome="accepted"), fields=["id"], name="delivery_not_accepted_idx"),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="attempt",
            index=models.Index(condition=~Q(outcome__in=["", "ok"]), fields=["id"], name="attempt_not_ok_idx"),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="operation",
            index=models.Index(
                condition=Q(state__in=["needs_review", "unknown", "pending_approval"]),
                fields=["updated_at", "id"], name="operation_attention_idx",
            ),
        ),
        TrigramExtension(),  # CREATE EXTENSION pg_trgm on PostgreSQL; nothing elsewhere
        migrations.RunPython(add_search_indexes, remove_search_indexes),
    ]
