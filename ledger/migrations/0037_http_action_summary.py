from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("ledger", "0036_attempt_answers")]

    operations = [
        migrations.AddField(
            model_name="httpaction",
            name="summary",
            field=models.CharField(blank=True, max_length=200),
        ),
    ]
