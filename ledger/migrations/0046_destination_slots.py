"""Leased slots for a destination's calls in flight, used behind a pooler in transaction mode
(DATABASE_POOL_MODE=transaction), where a session's advisory lock would outlive its client's hold
on the server session (``ledger.engine.limits``)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0045_audit_mac_in_app"),
    ]

    operations = [
        migrations.CreateModel(
            name="DestinationSlot",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=300)),
                ("slot", models.PositiveIntegerField()),
                ("holder", models.CharField(blank=True, max_length=64)),
                ("held_until", models.DateTimeField()),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("name", "slot"), name="destinationslot_one_row_per_slot")
                ],
            },
        ),
    ]
