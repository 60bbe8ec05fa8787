"""The operation page shows everything the ledger knows about one operation, sensitive values masked,
and offers only the decisions the person may take in the operation's state."""

import re

import pytest

from ledger.models import Attempt, Operation
from ledger.people import approvals, conflict_decisions

MASK = "••••"


def test_it_shows_the_fields_of_the_operation(client, login, make_operation):
    login("viewer")
    operation = make_operation(
        "needs_review",
        external_id="ext-77",
        correlation_id="corr-5",
        last_error_category="permanent",
        last_error_message="owner does not exist",
    )

    page = client.get(f"/console/operations/{operation.pk}/").content.decode()

    assert f"<h1>{operation.key}</h1>" in page
    for label in [
        "State",
        "Action",
        "Workspace",
        "Attempts",
        "Next attempt",
        "Deadline",
        "External id",
        "Last error",
        "Correlation id",
        "Created",
        "Updated",
    ]:
        assert f"<dt>{label}</dt>" in page
    for value in ["needs_review", operation.action, "demo", "ext-77", "corr-5", "owner does not exist"]:
        assert value in page


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_it_masks_the_sensitive_fields_of_payload_and_conflicts(client, login, noted, role):
    login(role)
    operation = noted(note="first note", secret="s3cr3t-one").operation
    assert noted(note="second note", secret="s3cr3t-two").outcome == "conflict"

    page = client.get(f"/console/operations/{operation.pk}/").content.decode()

    assert "s3cr3t" not in page
    assert "<dt>Secret</dt><dd>••••</dd>" in page
    assert "<dt>Note</dt><dd>first note</dd>" in page
    assert "Sensitive values are masked: an approver or admin of demo sees them." in page
    differences = re.sub(r"\s+", " ", page)
    note = '<strong>Note</strong>: <span class="recorded">first note</span> → <span class="incoming">second note</span>'
    assert note in differences
    assert (
        f'<strong>Secret</strong>: <span class="recorded">{MASK}</span> → <span class="incoming">{MASK}</span>'
        in differences
    )


@pytest.mark.parametrize("role", ["approver", "admin"])
def test_it_shows_the_sensitive_values_to_a_person_who_may_see_them(client, login, noted, role):
    login(role)
    operation = noted(note="first note", secret="s3cr3t-one").operation
    noted(note="second note", secret="s3cr3t-two")

    page = re.sub(r"\s+", " ", client.get(f"/console/operations/{operation.pk}/").content.decode())

    assert MASK not in page
    assert "Sensitive values are masked" not in page
    assert "<dt>Secret</dt><dd>s3cr3t-one</dd>" in page
    assert (
        '<strong>Secret</strong>: <span class="recorded">s3cr3t-one</span> → <span class="incoming">s3cr3t-two</span>'
    ) in page


def test_it_shows_a_superuser_the_sensitive_values(client, noted, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    operation = noted(secret="s3cr3t-one").operation

    assert "<dt>Secret</dt><dd>s3cr3t-one</dd>" in client.get(f"/console/operations/{operation.pk}/").content.decode()


def test_it_masks_a_refunds_customer_and_amount(client, login, workspace):
    from ledger.intake.submit import submit_event

    login("viewer")
    data = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}
    operation = submit_event(workspace=workspace, source="api", raw={"action": "issue-refund", "data": data}).operation

    page = client.get(f"/console/operations/{operation.pk}/").content.decode()

    assert "C-1001" not in page
    assert "<dd>4500<" not in page
    assert "<dt>Customer</dt><dd>••••</dd>" in page
    assert "<dt>Amount</dt><dd>••••</dd>" in page
    assert "<dt>Currency</dt><dd>EUR</dd>" in page


def test_it_masks_every_value_of_an_action_that_is_no_longer_defined(client, login, noted, noted_action):
    """Which fields of a removed action were sensitive cannot be told: all of them are masked."""
    from ledger.actions import base

    login("viewer")
    operation = noted(note="first note").operation
    base.registry.coded.pop(noted_action.name)

    page = client.get(f"/console/operations/{operation.pk}/").content.decode()

    assert "first note" not in page
    assert "<dt>Note</dt><dd>••••</dd>" in page


def test_it_shows_attempts_deliveries_and_the_audit_trail(client, login, needing_review):
    login("viewer")
    attempt = Attempt.objects.get(operation=needing_review)

    page = client.get(f"/console/operations/{needing_review.pk}/").content.decode()

    for heading in ["Payload", "Result", "Attempts", "Deliveries", "Conflicts", "Approvals", "Audit trail"]:
        assert f"<h2>{heading}</h2>" in page
    for column in [
        "Number",
        "Outcome",
        "Started",
        "Duration ms",
        "Error",
        "HTTP status",
        "Idempotency key",
        "Received",
        "Source",
        "Delivery id",
        "Time",
        "Actor",
        "Kind",
        "From → to",
        "Message",
    ]:
        assert f'<th scope="col">{column}</th>' in page
    assert attempt.outcome == "permanent"
    assert "permanent" in page
    assert "owner does not exist" in page
    assert "accepted" in page  # the delivery's outcome
    assert "processing → needs_review" in page  # an audit row


def test_it_shows_approvals(client, login, workspace, scripted_action, django_user_model):
    from tests.ledger.conftest import submit

    consequential = scripted_action(consequential=True)
    operation = submit(workspace, consequential.name)
    assert operation.state == "pending_approval"
    approver = login("approver")
    approvals.reject_operation(operation, user=approver, note="wrong customer")

    page = client.get(f"/console/operations/{operation.pk}/").content.decode()

    assert "rejected" in page
    assert "wrong customer" in page
    assert ">approver<" in page


def forms_on(client, operation) -> set[str]:
    page = client.get(f"/console/operations/{operation.pk}/").content.decode()
    # Approve is a link: it leads to the approve confirmation (tests/console/test_operation_page_reading.py).
    return {
        label
        for label in ["Replay", "Cancel", "Approve", "Reject", "Apply incoming payload", "Dismiss"]
        if f">{label}</button>" in page or f">{label}</a>" in page
    }


def test_it_offers_replay_and_cancel_to_a_reviewer_of_an_operation_needing_review(client, login, make_operation):
    login("operator")
    assert forms_on(client, make_operation("needs_review", request_id="R-1")) == {"Replay", "Cancel"}
    assert forms_on(client, make_operation("pending", request_id="R-2")) == {"Cancel"}
    assert forms_on(client, make_operation("retrying", request_id="R-3")) == {"Cancel"}
    for state in ["unknown", "succeeded", "cancelled", "processing", "pending_approval"]:
        assert forms_on(client, make_operation(state, request_id=f"R-{state}")) == set(), state


def test_it_offers_approve_and_reject_to_an_approver_of_an_operation_awaiting_approval(client, login, make_operation):
    login("approver")
    waiting = make_operation("pending_approval", request_id="R-1")
    page = client.get(f"/console/operations/{waiting.pk}/").content.decode()

    assert forms_on(client, waiting) == {"Approve", "Reject"}
    assert f'name="fingerprint" value="{waiting.fingerprint}"' in page
    assert forms_on(client, make_operation("needs_review", request_id="R-2")) == set()


def test_it_offers_no_decision_to_a_viewer(client, login, make_operation, noted):
    login("viewer")
    noted(note="one")
    noted(note="two")
    for operation in [
        make_operation("needs_review", request_id="R-1"),
        make_operation("pending_approval", request_id="R-2"),
        Operation.objects.get(key__contains="R-9"),
    ]:
        assert forms_on(client, operation) == set()


def test_it_offers_conflict_decisions_only_while_the_conflict_is_open(client, login, noted):
    operator = login("operator")
    operation = noted(note="one").operation
    conflict = noted(note="two").conflict
    assert forms_on(client, operation) == {"Cancel", "Apply incoming payload", "Dismiss"}

    conflict_decisions.dismiss_conflict(conflict, user=operator, reason="stale")

    assert forms_on(client, operation) == {"Cancel"}


def test_a_held_operation_shows_the_deadline_its_claim_will_give_it(client, login, make_operation, time_machine):
    """A resume writes no operation (ledger.core.held_time): the page still shows the deadline with
    the time the pause held it given, not the stored one its next claim will replace."""
    from datetime import timedelta

    from django.utils import timezone

    from ledger.people.pause import set_paused

    login("viewer")
    start = timezone.now()
    time_machine.move_to(start, tick=False)
    operation = make_operation("pending", deadline=start + timedelta(minutes=5), state_changed_at=start)
    set_paused(paused=True, actor="ops", reason="vendor outage")
    time_machine.move_to(start + timedelta(hours=2), tick=False)
    set_paused(paused=False, actor="ops")

    page = client.get(f"/console/operations/{operation.pk}/").content.decode()

    deadline = page.split("<dt>Deadline</dt>", 1)[1].split("</dd>", 1)[0]
    given = (start + timedelta(hours=2, minutes=5)).replace(microsecond=0)
    assert f'datetime="{timezone.localtime(given).isoformat(timespec="seconds")}"' in deadline
