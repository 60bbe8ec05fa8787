"""What migrations share: operations and data steps they import, never each other.

A migration runs, on a fresh database, years after it was written, so everything it uses must do
then what it did when it was written. Hence this module, apart from the code that serves: nothing
here follows the models or the schedules as they change. Change nothing's behaviour here; a
migration that needs something else gets a new helper beside the old one.
"""

from datetime import timedelta

from django.db import migrations
from django.utils import timezone


class AddIndexConcurrentlyOnPostgres(migrations.AddIndex):
    """AddIndex, built CONCURRENTLY on PostgreSQL (the migration must not be atomic): a plain
    CREATE INDEX on a table of millions of rows would block intake's writes for the whole build."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.add_index(model, self.index, **_concurrently(schema_editor))

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.remove_index(model, self.index, **_concurrently(schema_editor))


class RemoveIndexConcurrentlyOnPostgres(migrations.RemoveIndex):
    """RemoveIndex, dropped CONCURRENTLY on PostgreSQL (the migration must not be atomic)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            index = from_state.models[app_label, self.model_name_lower].get_index_by_name(self.name)
            schema_editor.remove_index(model, index, **_concurrently(schema_editor))

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            index = to_state.models[app_label, self.model_name_lower].get_index_by_name(self.name)
            schema_editor.add_index(model, index, **_concurrently(schema_editor))


def _concurrently(schema_editor) -> dict:
    return {"concurrently": True} if schema_editor.connection.vendor == "postgresql" else {}


def ensure_schedule(schedule_model, *, name: str, func: str, minutes: int = 1) -> None:
    """Exactly one django-q2 schedule named ``name``, running ``func`` every ``minutes``, however
    often this runs. ``schedule_model`` is the migration's historical ``Schedule``
    (``apps.get_model("django_q", "Schedule")``), and the migration states the row itself, so it
    creates the same schedule whatever the code that serves says later.

    ``Schedule.name`` is not unique in django-q2, so duplicates left by two concurrent deployments
    are removed here. ``next_run`` is set so a fresh schedule does not fire at once, and the
    schedule has no ``args``: one schedule with bad args stops every schedule of its cluster.
    """
    schedules = list(schedule_model.objects.filter(name=name).order_by("id"))
    keep = schedules[0] if schedules else schedule_model(name=name)
    for extra in schedules[1:]:
        extra.delete()
    keep.func = func
    keep.args = None
    keep.kwargs = None
    keep.schedule_type = "I"  # MINUTES
    keep.minutes = minutes
    keep.repeats = -1
    if keep.next_run is None or keep.pk is None:
        keep.next_run = timezone.now() + timedelta(minutes=minutes)
    keep.save()
