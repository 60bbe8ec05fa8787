"""``ledger_reserve`` names the columns it writes (a batch's rows come as typed arrays, one per
column an event varies, not as JSON rows that ``jsonb_populate_record`` would fill whatever the
model): every column of the operation and delivery models must be in its lists, so a column added
to a model later fails here until the function writes it, rather than being left to its default."""

import re

import pytest
from django.db import connection

from ledger.models import Delivery, Operation


def inserted_columns(table: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_functiondef('ledger_reserve'::regproc)")
        definition = cursor.fetchone()[0]
    lists = re.findall(rf"INSERT INTO {table} \(([^)]*)\)", definition)
    assert len(lists) == 1, lists
    return [name.strip() for name in lists[0].split(",")]


@pytest.mark.django_db
@pytest.mark.parametrize("model", [Operation, Delivery])
def test_a_batch_writes_every_column_of_the_model(model):
    columns = inserted_columns(model._meta.db_table)

    assert sorted(columns) == sorted(field.column for field in model._meta.concrete_fields)
    assert len(columns) == len(set(columns))
