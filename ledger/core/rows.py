"""Model instances as the rows PostgreSQL functions insert (``jsonb_populate_record``): every
column as Django would write it, so columns added later reach the tables without a change there."""

import json
from datetime import datetime


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
