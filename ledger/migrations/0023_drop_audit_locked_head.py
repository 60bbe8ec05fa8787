"""``ledger_audit_locked_head`` (0008) is no longer called: ``ledger.audit.append`` locks the chain and
reads its head inside ``ledger_audit_append`` (0021). Dropped, so the database holds no function
nothing uses; unapplying this migration makes it again."""

import importlib

from django.db import migrations

_MADE_IN = importlib.import_module("ledger.migrations.0008_intake_fast_path")


class Migration(migrations.Migration):
    dependencies = [("ledger", "0022_generic_plans")]

    operations = [
        migrations.RunPython(_MADE_IN.drop_locked_head, _MADE_IN.create_locked_head, elidable=False),
    ]
