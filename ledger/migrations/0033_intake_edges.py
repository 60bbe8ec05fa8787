"""Placeholder reserved for issue 23 (identity normalisers); filled by that change or removed."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("ledger", "0032_audit_keyed")]
    operations = []
