"""Fields as people read them: the title the action's schema gives (a coded schema's
``Field(title=…)``, a configured action's JSON Schema ``title``), else the name humanised; never the
raw name."""

import pytest

from ledger.actions import get_action
from ledger.actions.base import humanised
from ledger.integrations.http_action import ConfiguredHttpAction


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("amount_cents", "Amount cents"),
        ("customer_id", "Customer ID"),
        ("request_id", "Request ID"),
        ("callback-url", "Callback URL"),
        ("title", "Title"),
        ("_", "_"),
    ],
)
def test_it_humanises_a_name_without_a_title(name, label):
    assert humanised(name) == label


def test_a_refund_reads_amount_and_customer():
    refund = get_action("issue-refund")

    labels = [refund.field_label(name) for name in refund.field_names()]

    assert labels == ["Request ID", "Version", "Customer", "Amount", "Currency"]


def test_pydantics_own_titles_are_not_taken_for_chosen_ones():
    brief = get_action("prepare-brief")

    assert brief.data_schema()["properties"]["request_id"]["title"] == "Request Id"  # pydantic's, from the name
    assert brief.field_titles() == {}
    assert brief.field_label("request_id") == "Request ID"


def test_a_configured_action_takes_its_json_schema_titles():
    action = ConfiguredHttpAction.__new__(ConfiguredHttpAction)  # only its schema is read
    action.json_schema = {
        "type": "object",
        "properties": {
            "amount_cents": {"type": "integer", "title": "Amount"},
            "customer": {"type": "string", "title": "  "},
            "invoice_id": {"type": "string"},
        },
    }

    assert [action.field_label(name) for name in action.field_names()] == ["Amount", "Customer", "Invoice ID"]
