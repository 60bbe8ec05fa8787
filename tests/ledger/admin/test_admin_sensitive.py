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


@pytest.mark.parametrize(("role", "whole"), [("viewer", False), ("operator", False), ("approver", True)])
def test_the_fingerprints_are_shown_as_the_values_are(client, staff, refund, role, whole):
    """An unkeyed hash of the payload's fields: hashing guesses against it would give away what the
    page masks (``privacy.fingerprint_shown``)."""
    staff(role)
    conflict = Conflict.objects.get()

    shown = pages(client, refund)

    assert (refund.fingerprint in shown) is whole
    assert (conflict.incoming_fingerprint in shown) is whole


@pytest.mark.parametrize(("role", "found"), [("viewer", False), ("approver", False)])
def test_a_sensitive_request_id_is_not_searched_by_its_parts(client, staff, workspace, standin, role, found):
    from tests import configured as integrations

    integrations.apply_send_invoice(standin.url, sensitive_fields=["request_id"], summary="invoice in {currency}")
    data = {
        "request_id": "ann.secret@example.com",
        "version": 1,
        "customer_id": "C",
        "amount_cents": 5,
        "currency": "EUR",
    }
    operation = submit_event(workspace=workspace, source="api", raw={"action": "send-invoice", "data": data}).operation
    staff(role)

    page = client.get("/admin/ledger/operation/", {"q": "ann.sec"}).content.decode()
    by_key = client.get("/admin/ledger/operation/", {"q": operation.key[:12]}).content.decode()

    assert (f"/admin/ledger/operation/{operation.pk}/change/" in page) is found
    assert f"/admin/ledger/operation/{operation.pk}/change/" in by_key


@pytest.mark.parametrize(("role", "whole"), [("viewer", False), ("approver", True)])
def test_a_decisions_fingerprint_is_shown_as_the_values_are(client, staff, refund, person, role, whole):
    from ledger.models import Approval, AuditEvent
    from ledger.people import approvals, conflict_decisions

    conflict_decisions.dismiss_conflict(Conflict.objects.get(), user=person("ops", "operator"), reason="a retry")
    refund.refresh_from_db()
    approvals.approve_operation(refund, user=person("boss", "approver"), fingerprint=refund.fingerprint)
    approval = Approval.objects.get()
    event = AuditEvent.objects.get(kind="approval_approved")
    staff(role)

    for page in (f"/admin/ledger/approval/{approval.pk}/change/", f"/admin/ledger/auditevent/{event.pk}/change/"):
        answer = client.get(page)
        assert answer.status_code == 200
        assert (refund.fingerprint in answer.content.decode()) is whole, page
