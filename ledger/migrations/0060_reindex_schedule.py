from django.db import migrations

from ledger.migration_helpers import ensure_schedule


# The row is written here through the frozen helper, not through ledger.engine.schedules (see 0003).
# Weekly from a week after this migration ran; the interval keeps the phase of next_run, so moving
# next_run once (admin, Django Q > Scheduled tasks) to a quiet hour keeps it there.
def create_schedule(apps, schema_editor):
    ensure_schedule(apps.get_model("django_q", "Schedule"), name="opsconsole-reindex", func="ledger.tasks.reindex",
                    minutes=7 * 24 * 60)


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0059_token_in_claim"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(create_schedule, migrations.RunPython.noop)]
