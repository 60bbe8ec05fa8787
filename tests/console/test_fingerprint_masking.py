"""The payload's fingerprint is an unkeyed hash of its fields: where one is sensitive, a person who
sees the values masked is shown it masked too (on the operation page's approvals and audit trail, and
on the audit page), or they would find the values by hashing guesses; an approver sees it whole."""

import pytest

from ledger.core.vendor_text import MASK
from ledger.intake.submit import submit_event
from ledger.people import approvals

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


@pytest.fixture
def approved_refund(workspace, django_user_model):
    from ledger.models import Membership

    boss = django_user_model.objects.create_user(username="boss", password="pw")
    Membership.objects.create(user=boss, workspace=workspace, role="approver")
    operation = submit_event(
        workspace=workspace, raw={"action": "issue-refund", "data": REFUND}, source="api"
    ).operation
    approvals.approve_operation(operation, user=boss, fingerprint=operation.fingerprint)
    return operation


@pytest.mark.parametrize(("role", "whole"), [("viewer", False), ("operator", False), ("approver", True)])
def test_the_fingerprint_is_shown_as_the_values_are(client, login, approved_refund, role, whole):
    login(role)
    fingerprint = approved_refund.fingerprint

    for page in (f"/console/operations/{approved_refund.pk}/", "/console/audit/"):
        text = client.get(page).content.decode()
        assert (fingerprint in text) is whole, page
        if not whole:
            assert "(payload ••••)" in text or MASK in text


def test_an_action_without_sensitive_fields_shows_it_to_everyone(client, login, workspace):
    from tests.conftest import R42

    operation = submit_event(workspace=workspace, raw={"action": "prepare-brief", "data": R42}, source="api").operation
    login("viewer")

    from ledger.core import privacy

    assert privacy.fingerprint_shown(operation.fingerprint, "prepare-brief", reveal=False) == operation.fingerprint
    assert privacy.fingerprints_masked(f"ok (payload {operation.fingerprint})", "prepare-brief", reveal=False).endswith(
        f"{operation.fingerprint})"
    )
