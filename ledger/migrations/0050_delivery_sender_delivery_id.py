"""Delivery.delivery_id, the id the sender gave a delivery, is sender_delivery_id: beside the foreign
keys named ``delivery`` (whose columns are ``delivery_id``), one name meant two things.

The column is renamed in place. PostgreSQL keeps its partial index (delivery_sender_id_idx) on the
renamed column, predicate included, so the index is only described again in Django's state: dropping
and building it again would lock the deliveries table against intake for the whole build.
"""

from django.db import migrations, models
from django.db.models import Q


class Migration(migrations.Migration):
    dependencies = [("ledger", "0049_hook_refusal_source_hour")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RenameField(model_name="delivery", old_name="delivery_id", new_name="sender_delivery_id"),
            ],
            state_operations=[
                migrations.RemoveIndex(model_name="delivery", name="delivery_sender_id_idx"),
                migrations.RenameField(model_name="delivery", old_name="delivery_id", new_name="sender_delivery_id"),
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
