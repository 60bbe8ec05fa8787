"""A refused event's errors never quote a sensitive value it carried: they are kept on its delivery
(shown on the console's deliveries page and the API's operation page to everyone in the workspace,
viewers and machines' tokens too) and answered to whoever sent it. A configured action's schema is
checked by jsonschema, whose messages quote the value they refuse (``'C-1001…' is too long``)."""

import pytest

from ledger.core.vendor_text import MASK
from ledger.intake.submit import submit_event
from ledger.models import Delivery

SECRET_CUSTOMER = "CUST-SECRET-0077"
INVOICE = {"request_id": "INV-9", "version": 1, "customer_id": SECRET_CUSTOMER, "amount_cents": 4500, "currency": "EUR"}


@pytest.fixture
def sensitive_invoice(db, standin):
    """The demo's caller action, from its file, with its customer and amount sensitive."""
    from tests import configured as integrations

    integrations.apply_send_invoice(standin.url, sensitive_fields=["customer_id", "amount_cents"])


def refused_errors(workspace, data) -> list[dict]:
    answer = submit_event(workspace=workspace, raw={"action": "send-invoice", "data": data}, source="api")
    assert answer.blocked
    assert answer.errors == Delivery.objects.get().errors  # what the sender is answered is what is kept
    return answer.errors


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"customer_id": SECRET_CUSTOMER * 10}, "data.customer_id"),  # too long: quotes it
        ({"customer_id": 77123456}, "data.customer_id"),  # not a string: quotes it
        ({"amount_cents": 987654321012}, "data.amount_cents"),  # over the maximum: quotes it
    ],
)
def test_a_refused_sensitive_value_is_not_kept_in_the_deliverys_errors(
    workspace, sensitive_invoice, changes, field, log_guard
):
    errors = refused_errors(workspace, INVOICE | changes)

    assert [error["field"] for error in errors] == [field]
    [value] = changes.values()
    assert str(value) not in errors[0]["message"]
    assert MASK in errors[0]["message"]


def test_a_refusal_of_the_whole_payload_does_not_quote_its_sensitive_values(workspace, standin, log_guard):
    from tests import configured as integrations

    integrations.apply_send_invoice(standin.url, sensitive_fields=["customer_id"])
    errors = refused_errors(workspace, INVOICE | {"unexpected": "x"})

    assert errors
    assert all(SECRET_CUSTOMER not in error["message"] for error in errors), errors


def test_what_is_not_sensitive_is_still_quoted(workspace, sensitive_invoice):
    errors = refused_errors(workspace, INVOICE | {"currency": "euros"})

    assert errors == [{"field": "data.currency", "message": "'euros' does not match '^[A-Z]{3}$'"}]
