"""Bulk actions and their items (ledger.bulk_actions), and the index of failure groups
(ledger.failures) on the operations that need review.

Non-atomic, so that on PostgreSQL the operation index is built CONCURRENTLY (as in 0007): a plain
CREATE INDEX on millions of operations would block intake's writes for the whole build.
"""

import django.db.models.deletion
import django.db.models.expressions
from django.conf import settings
from django.db import migrations, models

from ledger.migration_helpers import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('ledger', '0018_find_indexes'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='BulkAction',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('replay', 'Replay'), ('cancel', 'Cancel')], max_length=10)),
                ('reason', models.CharField(max_length=500)),
                ('token', models.CharField(max_length=64)),
                ('accept_duplicate_risk', models.BooleanField(default=False)),
                ('accept_config_change', models.BooleanField(default=False)),
                ('criterion', models.TextField(blank=True)),
                ('operation_ids', models.JSONField()),
                ('total', models.PositiveIntegerField()),
                ('done', models.PositiveIntegerField(default=0)),
                ('skipped', models.PositiveIntegerField(default=0)),
                ('failed', models.PositiveIntegerField(default=0)),
                ('status', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('finished', 'Finished')], default='queued', max_length=10)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'ordering': ['-created_at', '-id'],
            },
        ),
        migrations.CreateModel(
            name='BulkItem',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('outcome', models.CharField(choices=[('replayed', 'Replayed'), ('forced', 'Forced'), ('found', 'Found'), ('cancelled', 'Cancelled'), ('skipped', 'Skipped'), ('failed', 'Failed')], max_length=10)),
                ('detail', models.CharField(blank=True, max_length=500)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
            ],
            options={
                'ordering': ['bulk_action', 'id'],
            },
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name='operation',
            index=models.Index(condition=models.Q(('state', 'needs_review')), fields=['action', 'last_error_category', 'last_error_message', 'workspace', 'updated_at'], name='operation_failure_idx'),
        ),
        migrations.AddField(
            model_name='bulkaction',
            name='user',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddField(
            model_name='bulkitem',
            name='bulk_action',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='items', to='ledger.bulkaction'),
        ),
        migrations.AddField(
            model_name='bulkitem',
            name='operation',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='ledger.operation'),
        ),
        migrations.AddConstraint(
            model_name='bulkaction',
            constraint=models.UniqueConstraint(fields=('token',), name='bulk_action_unique_token'),
        ),
        migrations.AddConstraint(
            model_name='bulkaction',
            constraint=models.CheckConstraint(condition=models.Q(('kind__in', ['replay', 'cancel'])), name='bulk_action_kind_valid'),
        ),
        migrations.AddConstraint(
            model_name='bulkaction',
            constraint=models.CheckConstraint(condition=models.Q(('status__in', ['queued', 'running', 'finished'])), name='bulk_action_status_valid'),
        ),
        migrations.AddConstraint(
            model_name='bulkaction',
            constraint=models.CheckConstraint(condition=models.Q(('reason', ''), _negated=True), name='bulk_action_reason_given'),
        ),
        migrations.AddConstraint(
            model_name='bulkaction',
            constraint=models.CheckConstraint(condition=models.Q(('total__gt', 0)), name='bulk_action_not_empty'),
        ),
        migrations.AddConstraint(
            model_name='bulkaction',
            constraint=models.CheckConstraint(condition=models.Q(('done__lte', django.db.models.expressions.CombinedExpression(django.db.models.expressions.CombinedExpression(models.F('total'), '-', models.F('skipped')), '-', models.F('failed')))), name='bulk_action_counts_within_total'),
        ),
        migrations.AddConstraint(
            model_name='bulkaction',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('done', django.db.models.expressions.CombinedExpression(django.db.models.expressions.CombinedExpression(models.F('total'), '-', models.F('skipped')), '-', models.F('failed'))), ('finished_at__isnull', False), ('status', 'finished')), models.Q(models.Q(('status', 'finished'), _negated=True), ('finished_at__isnull', True)), _connector='OR'), name='bulk_action_finished_when_all_done'),
        ),
        migrations.AddIndex(
            model_name='bulkitem',
            index=models.Index(fields=['bulk_action', 'created_at', 'id'], name='bulk_item_page_idx'),
        ),
        migrations.AddConstraint(
            model_name='bulkitem',
            constraint=models.UniqueConstraint(fields=('bulk_action', 'operation'), name='bulk_item_once'),
        ),
        migrations.AddConstraint(
            model_name='bulkitem',
            constraint=models.CheckConstraint(condition=models.Q(('outcome__in', ['replayed', 'forced', 'found', 'cancelled', 'skipped', 'failed'])), name='bulk_item_outcome_valid'),
        ),
    ]
