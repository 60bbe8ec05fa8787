"""Subscriptions: where a workspace is told that its operations changed (ledger.models.subscriptions)."""

import django.contrib.postgres.fields
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0052_token_scopes"),
    ]

    operations = [
        migrations.CreateModel(
            name="Subscription",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.SlugField(help_text="The integrations file's key for it.", unique=True)),
                ("url", models.URLField(help_text="Where notifications are POSTed (http or https).", max_length=500)),
                (
                    "events",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(max_length=40),
                        help_text="The events it is told: operation.due, operation.needs_review, operation.unknown, operation.awaiting_approval, operation.succeeded, operation.conflict",
                        size=None,
                    ),
                ),
                (
                    "secret_env",
                    models.CharField(
                        help_text="Environment variable holding the whsec_ signing secret.", max_length=100
                    ),
                ),
                ("active", models.BooleanField(default=True, help_text="Inactive: no notification is created for it.")),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "workspace",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="subscriptions", to="ledger.workspace"
                    ),
                ),
            ],
            options={
                "ordering": ["name"],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            (
                                "events__contained_by",
                                [
                                    "operation.due",
                                    "operation.needs_review",
                                    "operation.unknown",
                                    "operation.awaiting_approval",
                                    "operation.succeeded",
                                    "operation.conflict",
                                ],
                            ),
                            models.Q(("events", []), _negated=True),
                        ),
                        name="subscription_events_valid",
                    )
                ],
            },
        ),
    ]
