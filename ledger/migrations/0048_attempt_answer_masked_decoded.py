"""Attempts say whether their answer was masked after decoding: the rows kept until now
were not (False), every row from now on is (True)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("ledger", "0047_hook_refusals")]

    operations = [
        # Added False for the rows there are (a constant default: no table rewrite), then True for new ones.
        migrations.AddField(
            model_name="attempt",
            name="answer_masked_decoded",
            field=models.BooleanField(default=False, db_default=False),
        ),
        migrations.AlterField(
            model_name="attempt",
            name="answer_masked_decoded",
            field=models.BooleanField(default=True, db_default=True),
        ),
    ]
