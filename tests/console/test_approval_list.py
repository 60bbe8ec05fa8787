"""Approval as a work list: the refunds awaiting an approver with their amounts,
a total per currency and who is behind each; "approve selected" through one confirmation that
repeats every operation's amount, customer and fingerprint and the total; four eyes, the role and
the fingerprint checked per operation, each approval audited and bound to its fingerprint; and after
a decision, the next item, not the same operation.

Refunds arrive through the HTTP API with a person's token (issued by ``token issue --user``), the
entry point that records who submitted them; nothing here writes who submitted an operation."""

import html
import json
import re
from io import StringIO

import pytest
from django.contrib.messages import get_messages
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from ledger.models import Approval, AuditEvent, Operation
from ledger.people import bulk_approvals
from ledger.people.approvals import ApprovalError, approve_operation

REFUND = {"request_id": "R-1", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def issue_token(username: str | None = None) -> str:
    """A token issued the way an operator does (``token issue``; the token is the last line)."""
    out = StringIO()
    call_command("token", "issue", "demo", "--name", "laptop", *(["--user", username] if username else []), stdout=out)
    return out.getvalue().splitlines()[-1]


def send_refund(token: str, number: int, **data) -> Operation:
    """POST one issue-refund event to the HTTP API with ``token``: it awaits approval."""
    response = Client().post(
        "/api/v1/events",
        json.dumps(
            {
                "action": "issue-refund",
                "data": REFUND | {"request_id": f"R-{number}", "customer_id": f"C-{number}"} | data,
            }
        ),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 201, response.json()
    operation = Operation.objects.get(pk=response.json()["operation"]["id"])
    assert operation.state == "pending_approval"
    return operation


def text_of(response) -> str:
    return html.unescape(re.sub(r"\s+", " ", response.content.decode()))


def messages_of(response) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]


def confirmation(client, operations) -> str:
    response = client.get("/console/approvals/confirm/", {"op": [op.pk for op in operations]})
    assert response.status_code == 200
    return response.content.decode()


def items_of(page: str) -> list[str]:
    """What the confirmation's form sends: one ``<id>:<fingerprint>`` per operation it shows."""
    return re.findall(r'name="item" value="([0-9]+:[0-9a-f]{64})"', page)


@pytest.fixture
def sender(person):
    return person("sender", "operator")


@pytest.fixture
def approver_client(client, approver):
    client.force_login(approver)
    return client


# --- the 20 refunds ----------------------------------------------------------------------------


def test_an_approver_approves_20_refunds_in_one_confirmation_one_refused_for_four_eyes(
    approver_client, approver, sender
):
    theirs = [send_refund(issue_token("sender"), n, amount_cents=1000 + n) for n in range(1, 20)]
    mine = send_refund(issue_token("approver"), 20, amount_cents=99_999)
    selected = [*theirs, mine]

    page = confirmation(approver_client, selected)
    shown = html.unescape(page)
    for op in selected:  # every operation's amount, customer and fingerprint, repeated
        assert f"{(op.payload['amount_cents']) / 100:.2f} EUR" in shown
        assert f'<span class="label">Customer</span> {op.payload["customer_id"]}</li>' in shown
        assert op.fingerprint in shown
    total = sum(op.payload["amount_cents"] for op in theirs)
    assert f"Total approved if you confirm: <strong>{total / 100:,.2f} EUR</strong>, 19 operations." in shown
    assert "1 of the selected is yours" in shown
    assert "amount_cents" not in shown
    assert "customer_id" not in shown
    assert len(items_of(page)) == 20
    assert not Approval.objects.exists()  # looking is not approving

    response = approver_client.post("/console/approvals/approve/", {"item": items_of(page), "note": "batch 7"})

    assert response.url == "/console/approvals/"
    assert messages_of(response) == [
        ("success", f"Approved 19 of 20 operations ({total / 100:,.2f} EUR)."),
        (
            "error",
            f"Not approved: approver submitted {mine.key}, so cannot approve it: four eyes means another person "
            "with the approve permission must.",
        ),
    ]
    approvals = Approval.objects.filter(decision="approved")
    assert approvals.count() == 19
    for approval in approvals.select_related("operation"):
        assert approval.fingerprint == approval.operation.fingerprint
        assert approval.approver == "approver"
        assert approval.operation.state == "pending"
    events = AuditEvent.objects.filter(kind="approval_approved")
    assert sorted(events.values_list("operation_id", flat=True)) == sorted(op.pk for op in theirs)
    for event in events.select_related("operation"):
        assert event.actor == "approver"
        assert event.message == f"batch 7 (payload {event.operation.fingerprint})"
    mine.refresh_from_db()
    assert mine.state == "pending_approval"
    assert not mine.approvals.exists()


# --- the list ------------------------------------------------------------------------------------


def test_the_list_shows_amounts_totals_per_currency_and_who_is_behind_each(approver_client, sender, person):
    person("other", "approver")
    euros = [send_refund(issue_token("sender"), n) for n in (1, 2)]
    yen = send_refund(issue_token(), 3, amount_cents=2500, currency="JPY")  # a machine's token
    mine = send_refund(issue_token("approver"), 4, currency="USD", amount_cents=120)

    page = text_of(approver_client.get("/console/approvals/"))

    assert (
        "4 operations await approval in your workspaces, totalling <strong>90.00 EUR, 2,500 JPY, 1.20 USD</strong>."
        in page
    )
    for op in [*euros, yen]:
        assert f'name="op" value="{op.pk}"' in page
    assert f'name="op" value="{mine.pk}"' not in page  # four eyes: not offered to its submitter
    assert "You submitted it: another approver must decide (four eyes)" in page
    assert "sender (submitted)" in page
    assert "approver (submitted)" in page
    assert '<span class="label">Customer</span> C-1</li>' in page
    assert '<span class="label">Request ID</span> R-1</li>' in page
    assert "2,500 JPY" in page
    assert "45.00 EUR" in page
    assert "amount_cents" not in page
    # Oldest first, the order their windows run out.
    assert page.index(euros[0].key) < page.index(euros[1].key) < page.index(yen.key) < page.index(mine.key)


def test_the_list_is_for_approvers(client, person):
    client.force_login(person("operator", "operator"))

    for response in (client.get("/console/approvals/"), client.get("/console/approvals/confirm/", {"op": [1]})):
        assert response.status_code == 403
        assert "operator may not approve or reject in any workspace" in response.content.decode()
    assert 'href="/console/approvals/"' not in client.get("/console/").content.decode()


def test_the_list_is_in_the_menu_of_an_approver(approver_client):
    assert 'href="/console/approvals/"' in approver_client.get("/console/").content.decode()


def test_an_empty_list_says_so(approver_client):
    assert "Nothing awaits your approval." in text_of(approver_client.get("/console/approvals/"))


def test_the_list_shows_only_the_workspaces_where_the_person_approves(approver_client, person):
    from ledger.core import accounts

    other, other_token = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    elsewhere = send_refund(other_token, 9)

    page = text_of(approver_client.get("/console/approvals/"))

    assert elsewhere.key not in page
    assert "Nothing awaits your approval." in page
    response = approver_client.get("/console/approvals/confirm/", {"op": [elsewhere.pk]})
    assert messages_of(response) == [
        ("error", "None of the selected operations awaits approval any more; nothing was approved.")
    ]


def test_the_list_costs_a_fixed_number_of_queries(approver_client, sender):
    token = issue_token("sender")
    send_refund(token, 1)

    def queries() -> int:
        # The fewer of two reads: now and then a request also checks whether the configured actions
        # changed (ledger.integrations.configured, every few seconds), whatever the page lists.
        counts = []
        for _ in range(2):
            with CaptureQueriesContext(connection) as captured:
                assert approver_client.get("/console/approvals/").status_code == 200
            counts.append(len(captured))
        return min(counts)

    few = queries()
    for n in range(2, 36):
        send_refund(token, n)
    assert queries() == few <= 12


def test_the_confirmation_costs_a_fixed_number_of_queries(approver_client, sender):
    token = issue_token("sender")
    operations = [send_refund(token, n) for n in range(1, 36)]

    def queries(selected) -> int:
        counts = []
        for _ in range(2):  # the fewer of two reads, as for the list
            with CaptureQueriesContext(connection) as captured:
                confirmation(approver_client, selected)
            counts.append(len(captured))
        return min(counts)

    assert queries(operations) == queries(operations[:1])


# --- failure paths -------------------------------------------------------------------------------


def test_nothing_selected_approves_nothing(approver_client, sender):
    send_refund(issue_token("sender"), 1)

    for send in (
        lambda: approver_client.get("/console/approvals/confirm/"),
        lambda: approver_client.post("/console/approvals/approve/", {"note": "x"}),
    ):
        response = send()
        assert response.url == "/console/approvals/"
        assert messages_of(response) == [("error", "Select at least one operation to approve; nothing was approved.")]
        approver_client.get(response.url)  # shows (and so spends) the message
    assert not Approval.objects.exists()
    assert not AuditEvent.objects.filter(kind__startswith="approval").exists()


@pytest.mark.parametrize("item", ["12", "x:y", "1:" + "0" * 63, "1:" + "G" * 64])
def test_a_garbled_selection_approves_nothing(approver_client, sender, item):
    op = send_refund(issue_token("sender"), 1)

    response = approver_client.post("/console/approvals/approve/", {"item": [f"{op.pk}:{op.fingerprint}", item]})

    assert messages_of(response) == [
        ("error", "The selection was not understood (reload the confirmation); nothing was approved.")
    ]
    op.refresh_from_db()
    assert op.state == "pending_approval"
    assert not Approval.objects.exists()


def test_a_payload_changed_since_the_confirmation_is_refused_and_the_rest_approved(approver_client, sender):
    token = issue_token("sender")
    kept, changed = send_refund(token, 1), send_refund(token, 2)
    page = confirmation(approver_client, [kept, changed])
    # The sender's redelivery with another amount, applied by a reviewer before the approver confirms.
    from ledger.people import conflict_decisions

    send = Client().post(
        "/api/v1/events",
        json.dumps({"action": "issue-refund", "data": changed.payload | {"amount_cents": 777_777}}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert send.status_code == 409
    changed.refresh_from_db()  # held by the conflict (issue-refund: on_conflict hold) until it is decided
    conflict_decisions.apply_conflict(changed.conflicts.get(), user=_admin(), reason="the sender corrected it")

    response = approver_client.post("/console/approvals/approve/", {"item": items_of(page)})

    assert messages_of(response) == [
        ("success", "Approved 1 of 2 operations (45.00 EUR)."),
        ("error", f"Not approved: The payload of {changed.key} changed since it was shown; look at it again."),
    ]
    changed.refresh_from_db()
    assert changed.state == "pending_approval"
    assert not changed.approvals.exists()
    assert not AuditEvent.objects.filter(operation=changed, kind="approval_approved").exists()
    assert kept.approvals.get().fingerprint == kept.fingerprint


def test_one_approved_by_someone_else_meanwhile_is_named_and_left_alone(approver_client, sender, person):
    token = issue_token("sender")
    first, second = send_refund(token, 1), send_refund(token, 2)
    page = confirmation(approver_client, [first, second])
    approve_operation(first, user=person("colleague", "approver"), fingerprint=first.fingerprint)

    response = approver_client.post("/console/approvals/approve/", {"item": items_of(page)})

    assert messages_of(response) == [
        ("success", "Approved 1 of 2 operations (45.00 EUR)."),
        ("error", f"Not approved: {first.key} was already approved by colleague."),
    ]
    assert list(first.approvals.values_list("approver", flat=True)) == ["colleague"]
    assert AuditEvent.objects.filter(operation=first, kind="approval_approved").count() == 1


def test_someone_who_may_not_approve_approves_nothing(client, person, sender):
    op = send_refund(issue_token("sender"), 1)
    client.force_login(person("operator", "operator"))

    response = client.post("/console/approvals/approve/", {"item": [f"{op.pk}:{op.fingerprint}"]})

    assert response.status_code == 403
    op.refresh_from_db()
    assert op.state == "pending_approval"
    assert not Approval.objects.exists()
    with pytest.raises(ApprovalError, match="viewer may not approve or reject in any workspace; nothing was approved"):
        bulk_approvals.approve_selected({op.pk: op.fingerprint}, user=person("viewer", "viewer"))


def test_an_approver_of_one_workspace_approves_nothing_in_another(approver_client, approver, person):
    from ledger.core import accounts

    _, other_token = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    elsewhere = send_refund(other_token, 9)
    person("watcher", "viewer", workspaces=("other",))

    response = approver_client.post(
        "/console/approvals/approve/", {"item": [f"{elsewhere.pk}:{elsewhere.fingerprint}"]}
    )

    assert messages_of(response) == [("error", f"Not approved: No operation {elsewhere.pk} in your workspaces.")]
    elsewhere.refresh_from_db()
    assert elsewhere.state == "pending_approval"
    assert not Approval.objects.exists()


# --- the next item -------------------------------------------------------------------------------


def test_after_approving_one_the_approver_lands_on_the_next(approver_client, sender):
    token = issue_token("sender")
    first, second = send_refund(token, 1), send_refund(token, 2)
    send_refund(issue_token("approver"), 3)  # the approver's own: never "next" for them

    response = approver_client.post(
        f"/console/operations/{first.pk}/approve/", {"fingerprint": first.fingerprint, "note": ""}
    )
    assert response.url == f"/console/operations/{second.pk}/"
    assert messages_of(response) == [("success", f"Approved {first.key}. Next awaiting your approval: {second.key}.")]
    assert f'href="/console/operations/{second.pk}/approve/"' in approver_client.get(response.url).content.decode()

    response = approver_client.post(
        f"/console/operations/{second.pk}/reject/", {"fingerprint": second.fingerprint, "note": "dup"}
    )
    assert response.url == "/console/approvals/"
    assert messages_of(response) == [("success", f"Rejected {second.key}. Nothing else awaits your approval.")]


def test_a_refused_single_approval_stays_on_its_operation(approver_client, sender):
    op = send_refund(issue_token("sender"), 1)

    response = approver_client.post(f"/console/operations/{op.pk}/approve/", {"fingerprint": "0" * 64})

    assert response.url == f"/console/operations/{op.pk}/"


def _admin():
    from django.contrib.auth.models import User

    return User.objects.create_superuser("reviewer-admin", password="pw")
