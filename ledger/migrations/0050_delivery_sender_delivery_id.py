"""Delivery.delivery_id, the id the sender gave a delivery, is sender_delivery_id: beside the foreign
keys named ``delivery`` (whose columns are ``delivery_id``), one name meant two things in the code.

The field is renamed in Django's state only: its column keeps its name (``db_column``), so nothing in
the database changes. A rename of the column would break the processes of the release before while a
deploy migrates (migrating comes before the new code serves: docs/operations.md), and intake with
them. The partial index (delivery_sender_id_idx) is described again on the new field's name.
"""

from django.db import migrations, models
from django.db.models import Q


class Migration(migrations.Migration):
    dependencies = [("ledger", "0049_hook_refusal_source_hour")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.RemoveIndex(model_name="delivery", name="delivery_sender_id_idx"),
                migrations.RenameField(model_name="delivery", old_name="delivery_id", new_name="sender_delivery_id"),
                migrations.AlterField(
                    model_name="delivery",
                    name="sender_delivery_id",
                    field=models.CharField(blank=True, db_column="delivery_id", max_length=200),
                ),
                migrations.AddIndex(
                    model_name="delivery",
                    index=models.Index(
                        condition=~Q(sender_delivery_id=""),
                        fields=["sender_delivery_id"],
                        name="delivery_sender_id_idx",
                    ),
                ),
            ],
        ),
    ]
