"""Placeholder reserved for issue 23 (keyed audit chain, TRUNCATE trigger); filled by that change or removed."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("ledger", "0031_lock_order")]
    operations = []
