from django.db import migrations

from ledger.migration_helpers import ensure_schedule


# The row is written here through the frozen helper, not through ledger.engine.schedules (see 0003).
def create_schedule(apps, schema_editor):
    ensure_schedule(apps.get_model("django_q", "Schedule"), name="opsconsole-purge", func="ledger.tasks.purge",
                    minutes=24 * 60)


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0011_retention_and_policy"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(create_schedule, migrations.RunPython.noop)]
