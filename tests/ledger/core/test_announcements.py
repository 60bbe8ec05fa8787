"""Announcements (ledger.core.announcements): each change a subscription asked for becomes one
notification operation, in the transaction of the change; what is announced, and what never is."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from ledger.actions.notify import NAME as NOTIFY
from ledger.core import announcements
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import Attempt, AuditEvent, Operation
from ledger.people.pause import set_paused
from ledger.people.replays import replay_operation
from reconciliation.reconcile import reconcile_operation
from tests.conftest import external_event
from tests.ledger.conftest import submit_brief
from tests.subscribed import subscribe, verified

pytestmark = [pytest.mark.usefixtures("send_invoice_action")]  # the demo's caller action, from its file

INVOICE = {"request_id": "INV-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def invoice(delivery_id="run-1", **data):
    return {"action": "send-invoice", "delivery_id": delivery_id, "data": INVOICE | data}


def notifications(**filters):
    return list(Operation.objects.filter(action=NOTIFY, **filters).order_by("id"))


def events_of(operation):
    return [n.payload["event"] for n in notifications(payload__about=operation.key)]


def test_a_caller_operation_whose_lookup_finds_nothing_is_announced_due_once_signed(api, workspace, receiver, standin):
    subscribe(workspace, receiver.url)
    claimed = api.post("/api/v1/claims", invoice()).json()
    report = {"token": claimed["token"], "outcome": "unknown", "error": "connection reset"}
    api.post(f"/api/v1/claims/{claimed['key']}/outcome", report)
    Attempt.objects.update(started_at=timezone.now() - timedelta(minutes=5))
    operation = Operation.objects.get(key=claimed["key"])

    assert reconcile_operation(operation, asked_by_person=True) == "absent"
    process_due_operations()

    assert events_of(operation) == ["operation.unknown", "operation.due"]
    due = [verified(taken) for taken in receiver.answered if b"operation.due" in taken.body]
    assert len(due) == 1
    assert due[0]["type"] == "operation.due"
    data = due[0]["data"]
    assert (data["key"], data["action"], data["state"]) == (claimed["key"], "send-invoice", "retrying")
    assert data["summary"] == "INV-7 v1 · invoice in EUR"
    assert data["link"].endswith(f"/console/operations/{operation.pk}/")
    [notification] = notifications(payload__event="operation.due")
    assert notification.state == "succeeded"
    assert receiver.answered[-1].headers["webhook-id"] == notification.key


def test_the_claim_that_reserves_an_operation_does_not_announce_it_due(api, workspace, receiver):
    subscribe(workspace, receiver.url)
    api.post("/api/v1/claims", invoice())

    assert notifications() == []


def test_a_caller_operation_submitted_as_an_event_is_announced_due(api, workspace, receiver):
    subscribe(workspace, receiver.url)
    operation = submit_event(workspace=workspace, raw=invoice(), source="api").operation

    assert events_of(operation) == ["operation.due"]


def test_a_retry_put_off_is_announced_due_at_its_next_try_not_before(api, workspace, receiver):
    subscribe(workspace, receiver.url)
    claimed = api.post("/api/v1/claims", invoice()).json()
    # A minute away: the backoff's jitter alone may put the next try a few milliseconds off, passed
    # before the assertion on a loaded machine.
    report = {"token": claimed["token"], "outcome": "failed", "category": "transient", "error": "HTTP 503"}
    report["retry_after"] = 60
    assert api.post(f"/api/v1/claims/{claimed['key']}/outcome", report).json()["state"] == "retrying"

    operation = Operation.objects.get(key=claimed["key"])
    [notification] = notifications(payload__event="operation.due")
    assert notification.next_attempt_at == operation.next_attempt_at > timezone.now()
    process_due_operations()
    assert receiver.received == []


def test_a_worker_operation_is_announced_by_its_state_never_as_due(workspace, receiver, standin):
    subscribe(workspace, receiver.url)
    operation = submit_event(workspace=workspace, raw=external_event("file-ticket"), source="api").operation
    process_due_operations()
    process_due_operations()  # the notification its success reserved

    assert events_of(operation) == ["operation.succeeded"]
    [body] = [verified(taken) for taken in receiver.answered]
    assert (body["type"], body["data"]["state"]) == ("operation.succeeded", "succeeded")


def test_arrivals_that_wait_for_a_person_or_conflict_are_announced(workspace, receiver, standin):
    subscribe(workspace, receiver.url)
    refund = {"request_id": "R-9", "version": 1, "customer_id": "C-1", "amount_cents": 100, "currency": "EUR"}
    awaiting = submit_event(
        workspace=workspace, raw={"action": "issue-refund", "delivery_id": "r", "data": refund}, source="api"
    ).operation
    submit_event(workspace=workspace, raw=invoice(), source="api")
    conflicting = submit_event(workspace=workspace, raw=invoice("run-2", amount_cents=9999), source="api")

    assert events_of(awaiting) == ["operation.awaiting_approval"]
    assert events_of(conflicting.operation) == ["operation.due", "operation.conflict"]


def test_a_sensitive_field_never_reaches_the_body(workspace, receiver, standin):
    subscribe(workspace, receiver.url, events=["operation.needs_review"])
    standin.fail_next({"kind": "status", "status": 400})
    welcome = {"email": "ann.secret@example.com", "version": 1, "language": "en"}
    raw = {"action": "send-welcome", "delivery_id": "w", "data": welcome}
    operation = submit_event(workspace=workspace, raw=raw, source="api").operation
    process_due_operations()
    process_due_operations()

    assert events_of(operation) == ["operation.needs_review"]
    [taken] = receiver.answered
    assert b"ann.secret" not in taken.body
    assert verified(taken)["data"]["state"] == "needs_review"


def test_only_the_events_an_active_subscription_asked_for_are_announced(workspace, receiver):
    subscribe(workspace, receiver.url, events=["operation.succeeded"], name="succeeded-only")
    subscribe(workspace, receiver.url, name="switched-off", active=False)
    submit_event(workspace=workspace, raw=invoice(), source="api")

    assert notifications() == []


def test_two_subscriptions_each_get_their_own_notification_of_one_change(workspace, receiver):
    subscribe(workspace, receiver.url, name="one")
    subscribe(workspace, receiver.url, name="two")
    operation = submit_event(workspace=workspace, raw=invoice(), source="api").operation

    keys = [n.key for n in notifications()]
    assert len(set(keys)) == 2
    assert events_of(operation) == ["operation.due", "operation.due"]


def test_a_duplicate_delivery_announces_nothing_more(workspace, receiver):
    subscribe(workspace, receiver.url)
    submit_event(workspace=workspace, raw=invoice(), source="api")
    submit_event(workspace=workspace, raw=invoice(), source="api")

    assert len(notifications()) == 1


@pytest.mark.django_db(transaction=True)
def test_a_change_rolled_back_announces_nothing(workspace, receiver):
    subscribe(workspace, receiver.url)
    announced = []

    def fails_after_announcing():
        with transaction.atomic():
            submit_event(workspace=workspace, raw=invoice(), source="api")
            announced.extend(notifications())
            raise RuntimeError("the change fails after it was announced")

    with pytest.raises(RuntimeError):
        fails_after_announcing()

    assert len(announced) == 1
    assert Operation.objects.count() == 0


def test_the_same_change_announced_again_is_refused_by_the_key(workspace, receiver):
    subscribe(workspace, receiver.url)
    operation = submit_event(workspace=workspace, raw=invoice(), source="api").operation
    [first] = notifications()
    again = announcements.Change(operation, first.payload["change"], "reserved", "pending")

    with pytest.raises(Exception, match="operation_unique_key"), transaction.atomic():
        announcements.announce([again])
    assert len(notifications()) == 1


def test_notifications_are_never_announced_themselves(workspace, receiver):
    subscribe(workspace, receiver.url)
    submit_event(workspace=workspace, raw=invoice(), source="api")
    process_due_operations()

    [notification] = notifications()
    assert notification.state == "succeeded"
    assert [verified(taken)["type"] for taken in receiver.answered] == ["operation.due"]


def test_a_subscription_saved_in_this_process_is_heard_at_once(workspace, receiver):
    submit_event(workspace=workspace, raw=invoice(), source="api")
    subscribe(workspace, receiver.url)
    submit_event(workspace=workspace, raw=invoice(request_id="INV-8"), source="api")

    assert [n.payload["about"] for n in notifications()] == ["demo:INV-8:v1:send-invoice"]


def test_internal_operations_finished_in_their_claim_are_announced_succeeded(workspace, receiver):
    subscribe(workspace, receiver.url, events=["operation.succeeded"])
    submit_brief(workspace, request_id="warm")
    process_due_operations()  # one at a time until prepare-brief is known to work
    briefs = [submit_brief(workspace, request_id=f"R-{n}") for n in range(3)]
    process_due_operations()  # the three finished in their claim (ledger_finish_claimed)

    for brief in briefs:
        brief.refresh_from_db()
        assert brief.state == "succeeded"
        [notification] = notifications(payload__about=brief.key)
        assert notification.payload["body"]["data"]["state"] == "succeeded"
    assert Attempt.objects.filter(operation__in=briefs, outcome="ok").count() == 3
    assert not AuditEvent.objects.filter(operation__in=briefs, to_state="processing").exists(), "never processing"


def test_a_caller_operation_a_person_replays_is_announced_due_after_needing_review(api, workspace, receiver, reviewer):
    subscribe(workspace, receiver.url)
    claimed = api.post("/api/v1/claims", invoice()).json()
    report = {"token": claimed["token"], "outcome": "failed", "category": "permanent", "error": "HTTP 400: bad VAT id"}
    api.post(f"/api/v1/claims/{claimed['key']}/outcome", report)
    operation = Operation.objects.get(key=claimed["key"])

    replay_operation(operation, user=reviewer, reason="VAT id fixed at the vendor")

    assert events_of(operation) == ["operation.needs_review", "operation.due"]


def test_a_released_pause_announces_the_caller_work_it_held_due_again(workspace, receiver):
    subscribe(workspace, receiver.url)
    set_paused(paused=True, reason="vendor down", workspace=workspace, action="send-invoice", actor="alice")
    operation = submit_event(workspace=workspace, raw=invoice(), source="api").operation
    [told_while_held] = notifications(payload__about=operation.key)

    set_paused(paused=False, workspace=workspace, action="send-invoice", actor="alice")

    resumed = AuditEvent.objects.get(kind="resumed")
    [arrived, released] = notifications(payload__about=operation.key)
    assert arrived == told_while_held
    assert (released.payload["event"], released.payload["change"]) == ("operation.due", resumed.pk)
    assert released.payload["body"]["data"]["state"] == "pending"


def test_a_release_announces_nothing_another_pause_still_holds_or_outside_its_scope(workspace, receiver):
    subscribe(workspace, receiver.url)
    set_paused(paused=True, reason="incident", actor="alice")
    set_paused(paused=True, reason="vendor down", workspace=workspace, action="send-invoice", actor="alice")
    submit_event(workspace=workspace, raw=invoice(), source="api")
    told = len(notifications())

    set_paused(paused=False, workspace=workspace, action="send-invoice", actor="alice")
    assert len(notifications()) == told  # the global pause still holds it

    set_paused(paused=False, actor="alice")
    assert len(notifications()) == told + 1


def test_one_release_announces_each_operation_it_held_once(workspace, receiver):
    subscribe(workspace, receiver.url)
    set_paused(paused=True, reason="vendor down", workspace=workspace, actor="alice")
    held = [
        submit_event(workspace=workspace, raw=invoice(f"run-{n}", request_id=f"INV-{n}"), source="api").operation
        for n in range(3)
    ]

    set_paused(paused=False, workspace=workspace, actor="alice")

    resumed = AuditEvent.objects.get(kind="resumed")
    released = notifications(payload__change=resumed.pk)
    assert sorted(n.payload["about"] for n in released) == sorted(operation.key for operation in held)


def test_a_configured_actions_sensitive_values_reach_neither_the_body_nor_the_due_list(
    api, workspace, receiver, standin
):
    """Declared in the file (not in Python): its summary leaves them out, in the notification and
    in the list a polling flow reads."""
    from tests import configured as integrations

    integrations.apply_send_invoice(standin.url, sensitive_fields=["customer_id", "amount_cents"])
    subscribe(workspace, receiver.url, events=["operation.due"])
    submit_event(workspace=workspace, raw=invoice(customer_id="CUST-SECRET-77", amount_cents=123457), source="api")
    process_due_operations()

    [taken] = receiver.answered
    assert verified(taken)["data"]["summary"] == "INV-7 v1 · invoice in EUR"
    listed = api.get("/api/v1/claims/due").content
    assert b"INV-7 v1" in listed
    for blob in (taken.body, listed):
        assert b"CUST-SECRET-77" not in blob
        assert b"123457" not in blob


def test_an_in_order_version_is_announced_due_when_its_predecessor_finishes_not_while_it_waits(
    api, workspace, receiver, standin
):
    from tests.configured import apply_send_invoice

    apply_send_invoice(standin.url, ordering="in_order")
    subscribe(workspace, receiver.url)
    first = api.post("/api/v1/claims", invoice()).json()
    second = submit_event(workspace=workspace, raw=invoice("run-2", version=2), source="api").operation

    assert events_of(second) == []  # its claim would be answered 409 waiting: not due
    assert api.post("/api/v1/claims", invoice("run-3", version=2)).json()["status"] == "waiting"

    report = {"token": first["token"], "outcome": "succeeded", "external_id": "inv_1"}
    assert api.post(f"/api/v1/claims/{first['key']}/outcome", report).json()["state"] == "succeeded"

    assert events_of(second) == ["operation.due"]
    [due] = notifications(payload__event="operation.due")
    assert due.payload["body"]["data"]["state"] == "pending"
    assert api.post("/api/v1/claims", invoice("run-3", version=2)).status_code == 201


def test_an_in_order_version_is_announced_due_when_its_predecessor_is_cancelled(
    api, workspace, receiver, standin, reviewer
):
    from ledger.people.cancellations import cancel_operation
    from tests.configured import apply_send_invoice

    apply_send_invoice(standin.url, ordering="in_order")
    subscribe(workspace, receiver.url)
    first = submit_event(workspace=workspace, raw=invoice(), source="api").operation
    second = submit_event(workspace=workspace, raw=invoice("run-2", version=2), source="api").operation

    cancel_operation(first, user=reviewer, reason="sent by hand")

    assert events_of(second) == ["operation.due"]
