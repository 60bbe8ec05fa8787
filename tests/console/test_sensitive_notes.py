"""Notes that cannot leak, in the console: a reason or note quoting a sensitive value is refused by the
service, the refusal (naming the field, never the value) is shown beside the field it was written
in, the refused text is shown again to nobody, and nothing is written; every such field says who
reads it."""

import re

import pytest
from django.utils import timezone

from ledger.intake.submit import submit_event
from ledger.models import Approval, Attempt, AuditEvent, BulkAction, Conflict, Operation
from ledger.states import State
from reconciliation.models import Mismatch, ReconciliationRun

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-7Q31", "amount_cents": 4500, "currency": "EUR"}
READERS = "Visible to everyone in workspace demo, including viewers and operators, who do not see sensitive values"


def refund(workspace, state=None, *, landed=False, **data):
    """A refund in ``state``; ``landed``: with a try whose answer was lost (it may have reached the
    destination), where Mark succeeded is offered."""
    operation = submit_event(
        workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND | data}
    ).operation
    if state:
        Operation.objects.filter(pk=operation.pk).update(state=state)  # test setup only
        operation.refresh_from_db()
    if landed:
        now = timezone.now()
        Attempt.objects.create(
            operation=operation, number=1, fencing_token=1, started_at=now, finished_at=now, outcome="ambiguous"
        )
    return operation


def written():
    return (
        list(Operation.objects.order_by("pk").values_list("pk", "state", "payload")),
        list(Conflict.objects.order_by("pk").values_list("pk", "status")),
        list(Mismatch.objects.order_by("pk").values_list("pk", "status")),
        AuditEvent.objects.count(),
        Approval.objects.count(),
        BulkAction.objects.count(),
    )


def refusal_beside(page: str, field_id: str) -> str:
    """The refusal shown beside the field ``field_id`` (``console/_note_help.html``)."""
    found = re.search(rf'<p class="field-error" id="{field_id}-refused" role="alert">([^<]*)</p>', page)
    assert found, (field_id, re.findall(r"message error.{0,200}", page))
    return found.group(1)


def refused(client, url, data, *, field_id, text, field="customer_id", label="reason", masked=True):
    """POST ``data``, follow the redirect, and check what the person sees: the refusal beside the
    field, a pointer to it at the top, not the text they wrote, nor (``masked``: to an operator) the value."""
    before = written()

    page = client.post(url, data, follow=True).content.decode()

    assert written() == before
    said = refusal_beside(page, field_id)
    assert said.startswith(f"The {label} contains the {field} of ")
    assert said.endswith("describe it without the value. Nothing was changed.")
    assert f'<a href="#{field_id}">see why, beside the field</a>' in page
    assert text not in page
    assert ("7Q31" not in page) is masked
    return page


@pytest.mark.parametrize(
    ("verb", "field_id", "extra"),
    [
        ("replay", "operation-reason", {}),
        ("cancel", "operation-reason", {}),
        ("resolve", "resolve-reason", {"external_id": "rec-1"}),
    ],
)
def test_a_decision_on_an_operation_refuses_a_reason_with_a_sensitive_value(
    client, login, workspace, verb, field_id, extra
):
    login("operator")
    operation = refund(workspace, State.NEEDS_REVIEW, landed=verb == "resolve")
    text = "Customer C-7Q31 called"

    page = refused(
        client, f"/console/operations/{operation.pk}/{verb}/", {"reason": text} | extra, field_id=field_id, text=text
    )

    assert refusal_beside(page, field_id).startswith("The reason contains the customer_id of this operation;")


def test_a_cancel_keeps_a_reason_without_the_value(client, login, workspace):
    login("operator")
    operation = refund(workspace, State.NEEDS_REVIEW)

    client.post(f"/console/operations/{operation.pk}/cancel/", {"reason": "the customer asked, ticket T-55"})

    operation.refresh_from_db()
    assert operation.state == State.CANCELLED
    assert AuditEvent.objects.get(kind="cancelled").message == "cancel: the customer asked, ticket T-55"


def test_every_reason_field_of_the_operation_page_says_who_reads_it(client, login, workspace):
    login("operator")
    operation = refund(workspace, State.NEEDS_REVIEW, landed=True)
    Operation.objects.filter(pk=operation.pk).update(attempts=1)

    page = client.get(f"/console/operations/{operation.pk}/").content.decode()

    for field_id in ("operation-reason", "resolve-reason"):
        assert f'aria-describedby="{field_id}-refused {field_id}-readers"' in page
        assert (
            f'<small class="readers" id="{field_id}-readers">{READERS}: a note that quotes one is refused.</small>'
            in page
        )


def test_a_rejection_refuses_a_note_with_a_sensitive_value(client, login, workspace):
    login("approver")
    operation = refund(workspace)
    text = "45.00 EUR is too much"

    page = refused(
        client,
        f"/console/operations/{operation.pk}/reject/",
        {"note": text, "fingerprint": operation.fingerprint},
        field_id="approval-note",
        text=text,
        field="amount_cents",
        label="note",
        masked=False,
    )

    # An approver sees the value on the page; only the refused text is not shown again.
    assert "45.00 EUR" in page


def test_an_approval_refuses_a_note_with_a_sensitive_value_on_its_confirmation(client, login, workspace):
    login("approver")
    operation = refund(workspace)
    before = written()

    response = client.post(
        f"/console/operations/{operation.pk}/approve/",
        {"note": "paid to c-7q31", "fingerprint": operation.fingerprint},
        follow=True,
    )

    assert written() == before
    assert response.redirect_chain == [(f"/console/operations/{operation.pk}/approve/", 302)]
    page = response.content.decode()
    assert refusal_beside(page, "approval-note").startswith("The note contains the customer_id of this operation;")
    assert "paid to c-7q31" not in page
    assert f'id="approval-note-readers">{READERS}' in page


def test_a_conflict_decision_on_the_operation_page_refuses_a_sensitive_value(client, login, workspace):
    login("operator")
    refund(workspace)
    conflict = submit_event(
        workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND | {"amount_cents": 9900}}
    ).conflict
    field_id = f"conflict-{conflict.pk}-reason"

    page = refused(
        client,
        f"/console/conflicts/{conflict.pk}/dismiss/",
        {"reason": "99.00 is wrong"},
        field_id=field_id,
        text="99.00 is wrong",
        field="amount_cents",
    )

    assert f"the amount_cents of the incoming payload of conflict {conflict.pk}" in refusal_beside(page, field_id)
    assert f'id="{field_id}-readers">{READERS}' in page


@pytest.mark.parametrize("where", ["row", "selection"])
def test_the_conflicts_inbox_refuses_a_sensitive_value(client, login, workspace, where):
    login("operator")
    operation = refund(workspace)
    conflict = submit_event(
        workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND | {"customer_id": "C-1002"}}
    ).conflict
    seen = {"seen": conflict.pk, "reason": "C-1002 is a typo", "conflict": [conflict.pk]}
    # A held conflict's row has its own form; the selection's form is below the dismiss-only ones.
    field_id = f"conflict-{conflict.pk}-reason" if where == "row" else "selection-reason"
    url, data = "/console/conflicts/dismiss/", seen | ({"field": field_id} if where == "row" else {})
    if where == "selection":  # ran since (test setup only): a dismiss-only conflict, ticked in its group
        Operation.objects.filter(pk=operation.pk).update(state="succeeded", attempts=1, last_error_category="")

    page = refused(client, url, data, field_id=field_id, text="C-1002 is a typo")

    assert f'id="{field_id}-readers">' in page


def test_a_bulk_action_of_a_failure_group_refuses_a_sensitive_value(client, login, workspace):
    login("operator")
    for request_id in ("R-1", "R-2"):
        refund(
            workspace,
            State.NEEDS_REVIEW,
            request_id=request_id,
            customer_id=f"C-100{request_id[-1]}",
        )
    Operation.objects.update(last_error_category="permanent", last_error_message="HTTP 400 from 10.0.0.1:443")
    html = client.get("/console/failures/").content.decode()
    group = re.search(r'name="group" value="([^"]*)"', html).group(1).replace("&lt;", "<").replace("&gt;", ">")
    token = re.search(r'name="token" value="([^"]*)"', html).group(1)
    field_id = re.search(r'<textarea id="(reason-[0-9a-f]+)"', html).group(1)
    assert f'id="{field_id}-readers">Visible to everyone in the workspaces of these operations' in html

    page = refused(
        client,
        "/console/bulk/",
        {"group": group, "token": token, "kind": "cancel", "reason": "all of C-1002's"},
        field_id=field_id,
        text="all of C-1002's",
    )

    # The group's form is open, so the refusal beside its reason is seen.
    assert re.search(r"<details open>\s*<summary>Replay or cancel all 2</summary>", page)


def test_a_bulk_action_of_a_selection_refuses_a_sensitive_value_at_the_top_of_the_queue(client, login, workspace):
    login("operator")
    operation = refund(workspace, State.NEEDS_REVIEW)
    before = written()

    page = client.post(
        "/console/bulk/",
        {"operation": [operation.pk], "token": "t-1", "kind": "cancel", "reason": "C-7Q31 again"},
        follow=True,
    ).content.decode()

    assert written() == before
    assert "The reason contains the customer_id of this operation;" in page
    assert "C-7Q31 again" not in page


def test_a_mismatch_decision_refuses_a_sensitive_value(client, login, workspace):
    login("operator")
    operation = refund(workspace, State.SUCCEEDED)
    now = operation.created_at
    run = ReconciliationRun.objects.create(started_at=now, since=now, until=now, status="succeeded")
    mismatch = Mismatch.objects.create(
        run=run,
        workspace=workspace,
        operation=operation,
        action="issue-refund",
        kind="missing_at_destination",
        reference=operation.key,
        record_id="rec-9",
        evidence={},
    )

    refused(
        client,
        f"/console/mismatches/{mismatch.pk}/acknowledge/",
        {"reason": "refund of 45.00 is known"},
        field_id=f"reason-{mismatch.pk}",
        text="refund of 45.00 is known",
        field="amount_cents",
    )


def test_the_pause_form_says_who_reads_its_reason(client, login):
    login("operator")

    page = client.get("/console/controls/").content.decode()

    assert "The reason is visible to everyone in the workspace paused" in page
