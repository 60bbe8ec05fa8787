"""A trigger on django-q2's queue table (``django_q_ormq``) that notifies ``ledger_task_enqueued``
after every insert, so the cluster's pusher, waiting on LISTEN (``ledger.brokers.ORM``), takes a
new task at once instead of at its next poll (0.1 s). Whoever enqueues (a web process, a worker's
follow-up, the scheduler) notifies without knowing it; the notification is sent when the
enqueuing transaction commits, and PostgreSQL folds the identical ones of one transaction into one.
PostgreSQL only; elsewhere the broker polls, as django-q2's does.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION ledger_announce_task() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ledger_task_enqueued', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER ledger_announce_task AFTER INSERT ON django_q_ormq
FOR EACH STATEMENT EXECUTE FUNCTION ledger_announce_task();
"""

DROP = """
DROP TRIGGER IF EXISTS ledger_announce_task ON django_q_ormq;
DROP FUNCTION IF EXISTS ledger_announce_task();
"""


def create_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE, params=None)


def drop_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0027_due_since_index"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(create_trigger, drop_trigger, elidable=False)]
