"""Work that waits for its caller's claim, in plain sight: the queue's "Due for their callers" tab
lists it with the queue's age filters, and the health line says how long the oldest has waited."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.intake.submit import submit_event
from ledger.models import Operation

pytestmark = [pytest.mark.usefixtures("send_invoice_action")]  # the demo's caller action, from its file

INVOICE = {"request_id": "INV-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def due_invoice(workspace, request_id: str, *, ago: timedelta) -> Operation:
    raw = {"action": "send-invoice", "delivery_id": request_id, "data": INVOICE | {"request_id": request_id}}
    operation = submit_event(workspace=workspace, raw=raw, source="api").operation
    Operation.objects.filter(pk=operation.pk).update(created_at=timezone.now() - ago)
    return operation


def test_the_queue_lists_due_caller_work_and_filters_it_by_age(client, login, workspace):
    old = due_invoice(workspace, "INV-1", ago=timedelta(hours=2))
    recent = due_invoice(workspace, "INV-2", ago=timedelta(minutes=5))
    login("viewer")

    listed = client.get("/console/", {"state": "due"})
    older_than_an_hour = client.get("/console/", {"state": "due", "age": "1h"})

    assert {op.pk for op in listed.context["page"].object_list} == {old.pk, recent.pk}
    assert [op.pk for op in older_than_an_hour.context["page"].object_list] == [old.pk]
    page = client.get("/console/").content.decode()
    assert "Due for their callers' claims: oldest" in page
    assert "Due for their callers" in listed.content.decode()


def test_nothing_due_says_so(client, login, workspace):
    login("viewer")

    response = client.get("/console/", {"state": "due"})

    assert "No operation waits for its caller's claim." in response.content.decode()
    assert "claims: oldest" not in client.get("/console/").content.decode()
