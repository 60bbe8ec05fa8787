"""Placeholder reserved for issue 23 (offboarding, attempts); filled by that change or removed."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("ledger", "0029_finish_claimed_in_database")]
    operations = []
