"""A lookup that says where a record carries our key (``lookup.reference``) believes only the records
that do: a vendor that ignores the search's filter answers with others' records, and one of them
alone would otherwise be taken for ours: the operation succeeded although nothing was done for it."""

import pytest

from ledger.actions import registry
from ledger.intake.submit import submit_event
from ledger.outcomes import Absent, CannotTell, Found

# A search the vendor does not filter by: every record of the day (the stand-in's listing window).
EVERY_RECORD = "/records?created_after=2000-01-01T00:00:00Z&created_before=2100-01-01T00:00:00Z"
INVOICE = {"request_id": "INV-1", "version": 1, "customer_id": "C-1", "amount_cents": 100, "currency": "EUR"}


@pytest.fixture
def invoice(workspace, standin):
    from tests import configured as integrations

    integrations.apply_send_invoice(
        standin.url, lookup={"path": EVERY_RECORD, "found": "records", "reference": "reference"}
    )
    return submit_event(workspace=workspace, raw={"action": "send-invoice", "data": INVOICE}, source="api").operation


def create_record(standin, reference: str) -> str:
    answer = standin.http.post("/records", json={"reference": reference, "payload": {"amount_cents": 100}})
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def test_another_operations_record_alone_is_not_taken_for_ours(invoice, standin):
    create_record(standin, "demo:INV-2:v1:send-invoice")

    assert isinstance(registry["send-invoice"].lookup(invoice), Absent)


def test_ours_among_others_is_found(invoice, standin):
    create_record(standin, "demo:INV-2:v1:send-invoice")
    ours = create_record(standin, invoice.key)

    found = registry["send-invoice"].lookup(invoice)

    assert isinstance(found, Found)
    assert found.external_id == ours


def test_two_records_carrying_our_key_need_a_person(invoice, standin):
    create_record(standin, invoice.key)
    create_record(standin, invoice.key)

    assert isinstance(registry["send-invoice"].lookup(invoice), CannotTell)


def test_a_reference_must_be_an_expression(db, standin):
    from ledger.integrations.file import IntegrationsError
    from tests import configured as integrations

    with pytest.raises(IntegrationsError, match=r"lookup\.reference"):
        integrations.apply_send_invoice(standin.url, lookup={"path": EVERY_RECORD, "reference": "[["})
