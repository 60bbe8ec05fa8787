"""Model instances as the rows PostgreSQL functions insert (``jsonb_populate_record``): every
column as Django would write it, so columns added later reach the tables without a change there.
And back: instances from the rows of a join written by hand (``Selected``), every column as the
ORM would read it."""

import json
from datetime import datetime

from django.db import connection


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
