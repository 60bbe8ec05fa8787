from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0048_attempt_answer_masked_decoded"),
    ]

    # Each refusal counted reads the addresses of its source's hour (at most 100 counted apart):
    # this index finds them without reading the source's other hours or the hour's other sources.
    operations = [
        migrations.AddIndex(
            model_name="hookrefusal",
            index=models.Index(fields=["source", "hour"], name="hook_refusal_source_hour_idx"),
        ),
    ]
