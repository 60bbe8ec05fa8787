from django.db import migrations

from ledger.migration_helpers import ensure_schedule


# The row is written here, on the historical Schedule, through the frozen helper (not through
# ledger.engine.schedules, code that serves and may change): this migration creates the same
# schedule on a fresh database whatever the code says later (Django's advice for data migrations).
def create_schedule(apps, schema_editor):
    ensure_schedule(apps.get_model("django_q", "Schedule"), name="opsconsole-reconcile",
                    func="reconciliation.tasks.reconcile", minutes=1)


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0003_sweep_schedule"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(create_schedule, migrations.RunPython.noop)]
