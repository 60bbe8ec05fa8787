"""Placeholder reserved for issue 23 (one lock order); filled by that change or removed."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("ledger", "0030_offboarding")]
    operations = []
