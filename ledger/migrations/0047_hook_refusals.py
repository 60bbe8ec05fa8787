import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0046_destination_slots"),
    ]

    operations = [
        migrations.CreateModel(
            name="HookRefusal",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("address", models.CharField(max_length=64)),
                ("reason", models.CharField(max_length=40)),
                ("hour", models.DateTimeField(help_text="The start of the hour these arrived in.")),
                ("count", models.PositiveBigIntegerField(default=1)),
                ("first_seen", models.DateTimeField()),
                ("last_seen", models.DateTimeField()),
                (
                    "source",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="refusals",
                        to="ledger.source",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["hour"], name="hook_refusal_hour_idx")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("source", "address", "reason", "hour"), name="hook_refusal_unique_hour"
                    )
                ],
            },
        ),
        # Half of each page kept free: a count bumped is a HOT update that stays on its page, and the
        # page is pruned of old versions as it fills, with or without autovacuum (docs/architecture.md).
        migrations.RunSQL(
            "ALTER TABLE ledger_hookrefusal SET (fillfactor = 50)",
            "ALTER TABLE ledger_hookrefusal RESET (fillfactor)",
        ),
    ]
