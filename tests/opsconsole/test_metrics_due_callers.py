"""/metrics counts the work that waits for its caller's claim: a caller-performed action's due
operation ages in ``opsconsole_oldest_retryable_age_seconds`` as any due work does."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.intake.submit import submit_event
from ledger.models import Operation
from ledger.people.pause import set_paused
from tests.opsconsole.test_metrics import metrics_token, scrape, value  # noqa: F401  (the token fixture)

pytestmark = [pytest.mark.usefixtures("send_invoice_action")]  # the demo's caller action, from its file

INVOICE = {"request_id": "INV-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def test_a_due_caller_operation_counts_in_the_oldest_retryable_age(client, workspace, time_machine):
    now = timezone.now()
    time_machine.move_to(now, tick=False)
    operation = submit_event(
        workspace=workspace, raw={"action": "send-invoice", "data": INVOICE}, source="api"
    ).operation
    Operation.objects.filter(pk=operation.pk).update(created_at=now - timedelta(seconds=90))

    body = scrape(client)

    assert value(body, 'opsconsole_oldest_retryable_age_seconds{action="send-invoice",held="false"}') == 90.0


def test_a_held_one_counts_as_held(client, workspace, time_machine):
    now = timezone.now()
    time_machine.move_to(now, tick=False)
    operation = submit_event(
        workspace=workspace, raw={"action": "send-invoice", "data": INVOICE}, source="api"
    ).operation
    Operation.objects.filter(pk=operation.pk).update(created_at=now - timedelta(seconds=30))
    set_paused(paused=True, reason="vendor down", workspace=workspace, action="send-invoice", actor="alice")

    body = scrape(client)

    assert value(body, 'opsconsole_oldest_retryable_age_seconds{action="send-invoice",held="true"}') == 30.0
    assert 'opsconsole_oldest_retryable_age_seconds{action="send-invoice",held="false"}' not in body
