"""What a person sees of sensitive values, in one place (``ledger.core.privacy``): the console, the
admin, the API and exports all show payloads through it."""

import pytest

from ledger.core import privacy
from ledger.core.privacy import MASK, REDACTED
from ledger.intake.submit import submit_event

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def refund(workspace):
    return submit_event(workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND}).operation


def test_it_masks_the_sensitive_fields_the_action_declares():
    assert privacy.masked(REFUND, "issue-refund", reveal=False) == REFUND | {"customer_id": MASK, "amount_cents": MASK}
    assert privacy.masked(REFUND, "issue-refund", reveal=True) == REFUND


def test_it_masks_every_field_of_an_action_it_does_not_know():
    assert privacy.masked({"note": "x"}, "gone-action", reveal=False) == {"note": MASK}


def test_it_shows_an_erased_value_as_erased():
    assert privacy.masked(REFUND | {"customer_id": REDACTED}, "issue-refund", reveal=False)["customer_id"] == REDACTED


def test_it_shows_what_is_not_a_dict_as_it_is():
    assert privacy.masked(None, "issue-refund", reveal=False) is None


def test_it_masks_both_sides_of_a_sensitive_difference():
    differences = [
        {"field": "amount_cents", "recorded": 4500, "incoming": 9900},
        {"field": "currency", "recorded": "EUR", "incoming": "USD"},
    ]

    assert privacy.masked_differences(differences, "issue-refund", reveal=False) == [
        {"field": "amount_cents", "recorded": MASK, "incoming": MASK},
        {"field": "currency", "recorded": "EUR", "incoming": "USD"},
    ]


def test_it_redacts_only_the_fields_named():
    assert privacy.redact(REFUND, ["customer_id", "absent"]) == REFUND | {"customer_id": REDACTED}


@pytest.mark.parametrize(
    ("role", "shown"), [("viewer", MASK), ("operator", MASK), ("approver", "C-1001"), ("admin", "C-1001")]
)
def test_an_export_row_shows_what_the_person_may_see(workspace, person, role, shown):
    operation = refund(workspace)

    row = privacy.exported(operation, user=person(f"{role}-person", role))

    assert row["payload.customer_id"] == shown
    assert row["payload.currency"] == "EUR"
    assert list(row) == [f"payload.{name}" for name in REFUND]


def test_an_export_row_for_a_person_of_another_workspace_is_masked(workspace, person):
    operation = refund(workspace)

    assert privacy.exported(operation, user=person("outsider", "admin", workspaces=()))["payload.customer_id"] == MASK


def test_the_roles_that_see_sensitive_values(workspace, person, admin_user):
    for role, sees in [("viewer", False), ("operator", False), ("approver", True), ("admin", True)]:
        assert privacy.may_view_sensitive(person(f"{role}-person", role), workspace.pk) is sees
    assert privacy.may_view_sensitive(admin_user, workspace.pk)
    assert not privacy.may_view_sensitive(None, workspace.pk)
