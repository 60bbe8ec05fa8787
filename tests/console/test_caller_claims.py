"""The console shows an operation its caller performs (docs/claims.md): who holds the claim and
until when, and after an expired lease, the ways a person decides."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.callers import claims
from ledger.callers.reports import OutcomeReport, report_outcome
from ledger.models import Operation

INVOICE = {"request_id": "INV-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


@pytest.fixture
def claimed(workspace, send_invoice_action):
    answer = claims.claim(
        workspace=workspace,
        raw={"action": "send-invoice", "data": INVOICE, "lease_seconds": 120},
        submitted_by="token:n8n-flow",
    )
    assert answer.status == claims.CLAIMED
    return answer


def test_the_page_says_the_caller_holds_the_claim_and_until_when(client, login, claimed):
    login("viewer")

    page = client.get(f"/console/operations/{claimed.operation.pk}/").content.decode()

    assert "<dt>Performed by</dt><dd>the caller, which claims it over the API" in page
    assert "token:n8n-flow holds claim 1" in page
    assert f"(the claim token it was given ends …{claimed.token[-6:]})" in page
    assert claimed.token not in page  # the whole token stays with its caller
    assert "<dt>Lease</dt><dd>token:n8n-flow, claim 1, until" in page


def test_an_expired_claim_is_unknown_in_the_queue_with_lookup_and_mark_succeeded(client, login, claimed, workspace):
    Operation.objects.filter(pk=claimed.operation.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    again = claims.claim(
        workspace=workspace, raw={"action": "send-invoice", "data": INVOICE}, submitted_by="token:n8n-flow"
    )
    assert again.status == "unknown"
    login("operator")

    queue = client.get("/console/?state=unknown").content.decode()
    page = client.get(f"/console/operations/{claimed.operation.pk}/").content.decode()

    assert claimed.operation.key in queue
    assert "the caller reported no outcome before its lease expired" in queue
    assert "The caller may have acted and did not say what came of it." in page
    assert "Look up now" in page
    assert "Mark succeeded" in page
    assert "if it has none, the caller's next claim may act again under the same key" in page


def test_a_worker_performed_operation_says_so(client, login, make_operation):
    login("viewer")
    operation = make_operation()

    page = client.get(f"/console/operations/{operation.pk}/").content.decode()

    assert "<dt>Performed by</dt><dd>opsconsole's workers</dd>" in page


def test_a_reported_failure_reads_in_the_callers_words_not_the_ledgers_class_names(client, login, claimed, workspace):
    """The outcome's badge says what kind of failure; the error column keeps what the caller said."""
    report = OutcomeReport(token=claimed.token, outcome="unknown", error="the connector timed out after 30 s")
    report_outcome(workspace=workspace, key=claimed.operation.key, report=report, actor="token:n8n-flow")
    login("viewer")

    page = client.get(f"/console/operations/{claimed.operation.pk}/").content.decode()

    assert "the connector timed out after 30 s" in page
    assert "AmbiguousError" not in page
