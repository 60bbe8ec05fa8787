"""Model instances as the rows PostgreSQL functions insert (``jsonb_populate_record``): every
column as Django would write it, so columns added later reach the tables without a change there.
And back: instances from the rows such a function returns as JSON (``from_json``), and from the
rows of a join written by hand (``Selected``), every column as the ORM would read it, through a
cursor that has PostgreSQL plan such a join once per connection (``prepared_cursor``)."""

import json
from datetime import datetime
from functools import cache

import psycopg
from django.db import connection, models


def model_row(instance, **values) -> dict:
    """The instance's columns (after setting ``values`` on it), without its id."""
    for name, value in values.items():
        setattr(instance, name, value)
    return {
        field.column: field.get_prep_value(getattr(instance, field.attname))
        for field in instance._meta.concrete_fields
        if not field.primary_key
    }


def json_value(value):
    """``json.dumps``'s ``default`` for rows: times as ISO 8601 (with their offset)."""
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def dumps(value) -> str:
    return json.dumps(value, default=json_value)


def from_json(model, row: dict, **related):
    """A model instance, as loaded from the database, from a row a function returned as JSON
    (``to_jsonb``): its values are JSON, so only the times need converting."""
    names, columns, times = _columns(model)
    values = [row[column] for column in columns]
    for index in times:
        if values[index] is not None:
            values[index] = datetime.fromisoformat(values[index])
    instance = model.from_db(connection.alias, names, values)
    for name, value in related.items():
        setattr(instance, name, value)
    return instance


@cache
def _columns(model) -> tuple[list[str], list[str], list[int]]:
    fields = model._meta.concrete_fields
    times = [index for index, field in enumerate(fields) if isinstance(field, models.DateTimeField)]
    return [field.attname for field in fields], [field.column for field in fields], times


class Selected:
    """A model's columns in a statement written by hand, and its instance back from a row of that
    statement: the columns follow the model (every concrete field, in order), and each value is
    converted as the ORM would (a JSONField's text parsed), so a hand-written join loads the same
    instances ``select_related`` would, without the ORM compiling the query at every call."""

    def __init__(self, model, alias: str, start: int):
        fields = model._meta.concrete_fields
        self.model = model
        self.sql = ", ".join(f"{alias}.{connection.ops.quote_name(field.column)}" for field in fields)
        self.start, self.end = start, start + len(fields)
        self._names = [field.attname for field in fields]
        self._pk = fields.index(model._meta.pk)
        self._converters = [
            (index, converter, field.get_col(alias))
            for index, field in enumerate(fields)
            for converter in field.get_db_converters(connection)
        ]

    def instance(self, row):
        """The instance in ``row`` (None when its primary key is NULL: an outer join found none)."""
        values = list(row[self.start : self.end])
        if values[self._pk] is None:
            return None
        for index, converter, column in self._converters:
            values[index] = converter(values[index], column, connection)
        return self.model.from_db(connection.alias, self._names, values)


class _PreparingCursor(psycopg.Cursor):
    """psycopg's server-side binding cursor, every statement prepared (on its first execution)."""

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True, binary=binary)


def prepared_cursor():
    """A cursor of Django's connection whose statements PostgreSQL plans once per connection.

    Django sends every statement unprepared (its cursors bind parameters on the client, and it
    turns psycopg's automatic preparing off so that a pooler may sit between). A join run at every
    request costs more to plan than to run: the API token lookup planned in ~0.2 ms of the
    server's CPU and ran in ~0.03 (bench/profile_request.py). Such statements, written by hand
    with ``%s`` placeholders, are sent through here; the rest stay Django's. As ``connection.cursor()``:
    the health check first, the connection opened if need be, and Django's wrappers around every
    execution (``execute_wrapper``, the debug log, errors as ``django.db`` errors). A prepared
    statement lives in its connection's session: PgBouncer in transaction mode keeps it only from
    1.21 on, with ``max_prepared_statements`` set. There (``DATABASE_POOL_MODE=transaction``) the
    settings leave psycopg's ``prepare_threshold`` None, and psycopg prepares nothing, these
    statements included: they run as any other (docs/operations.md, "Behind PgBouncer").
    """
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        # Django's own wrapping of a new cursor (private, so not in django-stubs).
        return connection._prepare_cursor(_PreparingCursor(connection.connection))  # type: ignore[attr-defined]
