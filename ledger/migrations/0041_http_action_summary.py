from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("ledger", "0040_on_conflict_hold")]

    operations = [
        migrations.AddField(
            model_name="httpaction",
            name="summary",
            field=models.CharField(blank=True, max_length=200),
        ),
    ]
