from django.db import migrations


def create_schedule(apps, schema_editor):
    from ledger.engine.schedules import ensure_reconcile_schedule

    ensure_reconcile_schedule(apps.get_model("django_q", "Schedule"))


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0003_sweep_schedule"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(create_schedule, migrations.RunPython.noop)]
