"""``notify-subscriber`` (ledger.actions.notify): a notification delivered through the engine to a
receiver that fails, as Standard Webhooks receivers do, and the refusals that need a person."""

import pytest

from ledger.actions.notify import NAME as NOTIFY
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import Operation
from tests.receiver import start_receiver
from tests.subscribed import SECRET, SECRET_ENV, subscribe, verified

pytestmark = [pytest.mark.usefixtures("send_invoice_action")]  # the demo's caller action, from its file

INVOICE = {"request_id": "INV-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


@pytest.fixture
def notification(workspace, receiver):
    """One operation.due notification, not yet sent."""
    subscribe(workspace, receiver.url, events=["operation.due"])
    submit_event(workspace=workspace, raw={"action": "send-invoice", "data": INVOICE}, source="api")
    return Operation.objects.get(action=NOTIFY)


def send_again(notification) -> Operation:
    Operation.objects.filter(pk=notification.pk).update(next_attempt_at=None)  # its retry is due
    process_due_operations()
    notification.refresh_from_db()
    return notification


@pytest.mark.parametrize("fault", ["503", "hang_up"])
def test_a_receiver_that_fails_gets_the_notification_under_the_same_webhook_id_once_it_recovers(
    notification, receiver, fault
):
    receiver.fail_next(fault)
    process_due_operations()
    notification.refresh_from_db()
    assert notification.state == "retrying"

    assert send_again(notification).state == "succeeded"
    assert {taken.headers["webhook-id"] for taken in receiver.received} == {notification.key}
    assert len(receiver.answered) == 1
    assert verified(receiver.answered[0])["type"] == "operation.due"


def test_every_try_is_signed_afresh_and_verifies(notification, receiver):
    receiver.fail_next("503")
    process_due_operations()
    send_again(notification)

    first, second = receiver.received
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert verified(first) == verified(second)


def test_a_secret_not_set_waits_for_a_person_and_sends_nothing(notification, receiver, monkeypatch):
    monkeypatch.delenv(SECRET_ENV)
    process_due_operations()

    notification.refresh_from_db()
    assert notification.state == "needs_review"
    assert notification.last_error_message == f"{SECRET_ENV} is not set: the notification cannot be signed"
    assert receiver.received == []


@pytest.mark.parametrize("value", ["not-a-whsec-secret", "whsec_!!not base64!!"])
def test_a_secret_that_is_not_a_standard_webhooks_one_waits_for_a_person(notification, receiver, monkeypatch, value):
    monkeypatch.setenv(SECRET_ENV, value)
    process_due_operations()

    notification.refresh_from_db()
    assert notification.state == "needs_review"
    assert "does not hold a whsec_ secret" in notification.last_error_message
    assert value not in notification.last_error_message
    assert receiver.received == []


def test_a_receiver_that_refuses_it_for_good_waits_for_a_person(notification, receiver):
    receiver.fail_next("410")
    process_due_operations()

    notification.refresh_from_db()
    assert (notification.state, notification.last_error_category) == ("needs_review", "permanent")


def test_nobody_can_submit_a_notification(api, workspace):
    raw = {"action": NOTIFY, "data": {"subscription": 1, "change": 1, "event": "operation.due"}}
    answer = api.post("/api/v1/events", raw)

    assert answer.status_code == 422
    [error] = answer.json()["errors"]
    assert error["field"] == "action"
    assert NOTIFY not in error["message"]
    assert not Operation.objects.exists()


def test_a_secret_another_workspace_came_to_own_is_never_signed_with(workspace, receiver, monkeypatch):
    """A subscription may name only its workspace's variables when saved; a workspace created since
    (``demo-eu``, whose prefix is longer) owns the name, and its secret: a notification is signed
    with it no more, as a source's delivery is not verified with it (``sources.secrets_of``)."""
    from ledger.core import accounts

    foreign = "OPSCONSOLE_SOURCE_DEMO_EU_NOTIFY"
    subscription = subscribe(workspace, receiver.url, events=["operation.due"])
    subscription.secret_env = foreign
    subscription.save(update_fields=["secret_env"])  # as the service saved it before demo-eu existed
    from ledger.core import announcements

    announcements.clear_cache()
    submit_event(workspace=workspace, raw={"action": "send-invoice", "data": INVOICE}, source="api")
    accounts.create_workspace(slug="demo-eu", approved_owners=["ops"], actor="test")
    monkeypatch.setenv(foreign, SECRET)  # demo-eu's own secret now

    process_due_operations()

    notification = Operation.objects.get(action=NOTIFY)
    assert notification.state == "needs_review"
    assert "is not workspace demo's to name" in notification.last_error_message
    assert receiver.received == []


def test_one_subscriptions_broken_receiver_holds_back_no_other_subscriptions_notifications(workspace, receiver):
    """Every receiver is the one action's destination: a breaker there would let one workspace's
    broken receiver pause every workspace's notifications. Each backs off alone instead."""
    broken = start_receiver()
    try:
        broken.fail_next(*["503"] * 20)
        subscribe(workspace, broken.url, events=["operation.due"], name="broken")
        for number in range(12):
            raw = {"action": "send-invoice", "data": INVOICE | {"request_id": f"INV-{number}"}}
            submit_event(workspace=workspace, raw=raw, source="api")
        process_due_operations()
        assert len(broken.received) == 12
        subscribe(workspace, receiver.url, events=["operation.due"], name="working")

        later = {"action": "send-invoice", "data": INVOICE | {"request_id": "INV-99"}}
        submit_event(workspace=workspace, raw=later, source="api")
        process_due_operations()
    finally:
        broken.close()

    assert [verified(taken)["data"]["summary"] for taken in receiver.answered] == ["INV-99 v1 · invoice in EUR"]
