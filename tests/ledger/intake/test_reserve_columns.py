"""``ledger_reserve`` names the columns it writes (a batch's rows come as typed arrays, one per
column an event varies, not as JSON rows that ``jsonb_populate_record`` would fill whatever the
model): every column of the operation and delivery models must be in its lists, so a column added
to a model later fails here until the function writes it, rather than being left to its default."""

import re

import pytest
from django.db import connection

from ledger.intake import submit
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


AWKWARD = ['"', "\\", '\\"', "{a,b}", "NULL", " spaced ", "é ☃ 𝄞", "a'b", "\\N", "}{"]


def test_a_batch_carries_every_character_through_its_arrays(workspace):
    """The arrays' text is quoted by hand (``reservation._array``): quotes, backslashes, braces,
    commas and the word NULL reach the rows as they were sent."""
    raws = [
        {
            "action": "prepare-brief",
            "delivery_id": text,
            "correlation_id": text,
            "data": {"request_id": f"R-{n}", "version": 1, "title": text, "owner": "ops"},
        }
        for n, text in enumerate(AWKWARD)
    ]

    results = submit.submit_batch(workspace=workspace, raw_events=raws, source="cli", submitted_by="test")

    assert [result.http_status for result in results] == [201] * len(AWKWARD)
    for n, text in enumerate(AWKWARD):
        operation = Operation.objects.get(key=results[n].key)
        delivery = Delivery.objects.get(operation=operation)
        # The title as the action normalises it (trimmed); the rest as sent.
        assert (operation.payload["title"], operation.correlation_id) == (text.strip(), text)
        assert (delivery.sender_delivery_id, delivery.correlation_id) == (text, text)
