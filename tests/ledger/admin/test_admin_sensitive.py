"""The admin shows payloads, results and conflicts as the console does: sensitive values masked
unless the person may see them in the row's workspace."""

import pytest

from ledger.intake.submit import submit_event
from ledger.models import Conflict, Operation

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


@pytest.fixture
def refund(workspace):
    operation = submit_event(
        workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND}
    ).operation
    changed = submit_event(
        workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND | {"customer_id": "C-2002"}}
    )
    assert changed.outcome == "conflict"
    Operation.objects.filter(pk=operation.pk).update(result={"record_id": "rec-1", "customer_id": "C-1001"})
    return operation


@pytest.fixture
def staff(client, person):
    def log_in(role: str):
        user = person(f"{role}-staff", role)
        user.is_staff = True
        user.save()
        client.force_login(user)
        return user

    return log_in


def pages(client, refund) -> str:
    conflict = Conflict.objects.get()
    operation_page = client.get(f"/admin/ledger/operation/{refund.pk}/change/")
    conflict_page = client.get(f"/admin/ledger/conflict/{conflict.pk}/change/")
    assert (operation_page.status_code, conflict_page.status_code) == (200, 200)
    return operation_page.content.decode() + conflict_page.content.decode()


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_it_masks_sensitive_values_for_staff_who_may_not_see_them(client, staff, refund, role):
    staff(role)

    shown = pages(client, refund)

    assert "C-1001" not in shown
    assert "C-2002" not in shown
    assert "&quot;amount_cents&quot;: 4500" not in shown
    assert shown.count("&quot;customer_id&quot;: &quot;••••&quot;") >= 3  # payload, result, incoming payload
    assert "&quot;recorded&quot;: &quot;••••&quot;" in shown
    assert "rec-1" in shown
    assert "EUR" in shown


@pytest.mark.parametrize("role", ["approver", "admin"])
def test_it_shows_them_to_staff_who_may(client, staff, refund, role):
    staff(role)

    shown = pages(client, refund)

    assert "••••" not in shown
    assert "&quot;customer_id&quot;: &quot;C-1001&quot;" in shown
    assert "&quot;amount_cents&quot;: 4500" in shown
    assert "&quot;incoming&quot;: &quot;C-2002&quot;" in shown


def test_it_shows_them_to_a_superuser(admin_client, refund):
    assert "&quot;customer_id&quot;: &quot;C-1001&quot;" in pages(admin_client, refund)
