"""The sender's delivery id is ``Delivery.sender_delivery_id`` in the code and ``delivery_id`` in the
database: the field was renamed in Django's state only (migration 0050), so the processes of the
release before, which still name the column, keep taking events while a deploy migrates."""

from django.db import connection

from ledger.intake import submit
from ledger.models import Delivery


def test_the_column_keeps_its_name_and_its_partial_index(db):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'ledger_delivery'"
            " AND column_name IN ('delivery_id', 'sender_delivery_id')"
        )
        columns = cursor.fetchall()
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'delivery_sender_id_idx'")
        [(index,)] = cursor.fetchall()

    assert columns == [("delivery_id",)]
    assert "(delivery_id)" in index
    assert "WHERE (NOT ((delivery_id)::text = ''::text))" in index


def test_an_event_taken_by_this_release_is_read_by_the_column_the_release_before_names(workspace):
    submit.submit_event(
        workspace=workspace,
        raw={
            "action": "prepare-brief",
            "delivery_id": "sender-7",
            "data": {"request_id": "R-7", "version": 1, "title": "Renewal", "owner": "ops"},
        },
        source="api",
        submitted_by="token:test",
    )

    with connection.cursor() as cursor:
        cursor.execute("SELECT delivery_id FROM ledger_delivery")
        assert cursor.fetchall() == [("sender-7",)]
    assert Delivery.objects.get().sender_delivery_id == "sender-7"
