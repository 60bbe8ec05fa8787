"""Due work announced and listable, through the real entry points: gunicorn as `make serve` runs it,
a real `qcluster`, PostgreSQL, the stand-in as the caller's vendor, and a receiver of the test's own
(a real HTTP server, tests/receiver.py) subscribed to the workspace's notifications.

- A caller action's operation claimed over HTTP and never acted on: its lease passes, a claim is
  answered unknown, the cluster's lookup finds nothing at the vendor, so it is due again. The
  receiver gets exactly one `operation.due` for it, signed (verified with the `standardwebhooks`
  library), and `GET /api/v1/claims/due` lists it until it is claimed.
- A receiver that fails (503s, then a hang-up after reading the request) still gets every
  notification once it recovers, and no change is notified twice: one webhook-id per (operation,
  event) at the receiver, a repeat of one notification carrying the same id.
"""

import json
import time
from collections import defaultdict

import httpx
import pytest

from ledger.actions.notify import NAME as NOTIFY
from ledger.core import announcements
from ledger.integrations import configured
from ledger.models import Operation
from ledger.states import State
from tests.faults.gunicorn import running_gunicorn
from tests.faults.qcluster import wait_for
from tests.subscribed import SECRET, SECRET_ENV, subscribe, verified

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

LEASE_SECONDS = 5  # the smallest the API allows


@pytest.fixture(scope="module")
def gunicorn(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        with running_gunicorn(tmp_path_factory.mktemp("gunicorn")) as running:
            yield running


@pytest.fixture
def server(gunicorn, transactional_db, send_invoice_action):
    """The module's server, once each of its processes has read the demo's send-invoice (applied from
    its integrations file by ``send_invoice_action``): they look again at most this long after a change."""
    time.sleep(configured.Loaded.REFRESH_SECONDS + 0.1)
    return gunicorn


@pytest.fixture
def subscribed(workspace, receiver):
    """The workspace subscribed to every event; the web server's announcer has read it (it reads
    subscriptions every CACHE_SECONDS, and an earlier test's are gone)."""
    subscription = subscribe(workspace, receiver.url)
    time.sleep(announcements.CACHE_SECONDS + 0.5)
    return subscription


def invoice(request_id: str) -> dict:
    return {"request_id": request_id, "version": 1, "customer_id": "C-7", "amount_cents": 2500, "currency": "EUR"}


def cluster_env(standin) -> dict[str, str]:
    return {"OPSCONSOLE_STANDIN_URL": standin.url, SECRET_ENV: SECRET}


def by_operation_and_event(receiver) -> dict[tuple[str, str], set[str]]:
    """The webhook-ids the receiver took, per (operation key, event), each verified."""
    found: dict[tuple[str, str], set[str]] = defaultdict(set)
    for taken in list(receiver.received):
        body = verified(taken)
        found[(body["data"]["key"], body["type"])].add(taken.headers["webhook-id"])
    return found


def test_an_expired_claim_the_vendor_never_saw_is_announced_due_once_and_listed_until_claimed(
    workspace, token, standin, server, receiver, subscribed, start_cluster, send_invoice_action
):
    headers = {"Authorization": f"Bearer {token}"}
    claim = {"action": send_invoice_action.name, "data": invoice("R-due"), "lease_seconds": LEASE_SECONDS}
    with httpx.Client(base_url=server.url, headers=headers, timeout=10) as api:
        claimed = api.post("/api/v1/claims", json=claim)
        assert claimed.status_code == 201, claimed.text
        key = claimed.json()["key"]
        time.sleep(LEASE_SECONDS + 0.5)  # the caller acted on nothing and reported nothing
        after_the_lease = api.post("/api/v1/claims", json=claim).json()
        assert after_the_lease["status"] == "unknown"

        cluster = start_cluster("notifying", env=cluster_env(standin))
        operation = wait_for(
            lambda: Operation.objects.filter(key=key, state=State.RETRYING).first(),
            timeout=90,
            clusters=(cluster,),
            describe=lambda: Operation.objects.get(key=key).state,
            message="the lookup did not find the operation absent at the vendor",
        )
        listed = api.get("/api/v1/claims/due").json()
        assert [item["key"] for item in listed["operations"]] == [key]
        assert listed["operations"][0]["state"] == "retrying"

        wait_for(
            lambda: (key, "operation.due") in by_operation_and_event(receiver),
            timeout=30,
            clusters=(cluster,),
            describe=lambda: f"{len(receiver.received)} taken",
            message="the receiver was not told the operation is due",
        )
        time.sleep(2)  # long enough for a second notification of the change to arrive, were there one
        due = [verified(taken) for taken in receiver.received if verified(taken)["type"] == "operation.due"]
        assert len(due) == 1
        assert due[0]["data"]["key"] == key
        assert due[0]["data"]["link"].endswith(f"/console/operations/{operation.pk}/")
        assert "C-7" not in json.dumps(due[0])  # the summary, never the payload
        assert api.get("/api/v1/claims/due").json()["operations"][0]["key"] == key, "still due"

        # As a flow told of it claims: by the key the notification gave, learning the data to send.
        again = api.post("/api/v1/claims", json={"key": due[0]["data"]["key"], "lease_seconds": LEASE_SECONDS})
        assert (again.status_code, again.json()["attempt"]) == (201, 2)
        assert again.json()["data"] == invoice("R-due")
        assert api.get("/api/v1/claims/due").json()["operations"] == []
    assert standin.records() == []


def test_a_receiver_that_fails_gets_each_notification_once_it_recovers_and_no_change_twice(
    workspace, token, standin, server, receiver, subscribed, start_cluster, send_invoice_action
):
    receiver.fail_next("503", "503", "hang_up", "503", "hang_up")
    headers = {"Authorization": f"Bearer {token}"}
    keys = []
    with httpx.Client(base_url=server.url, headers=headers, timeout=10) as api:
        for number in range(5):
            event = {"action": send_invoice_action.name, "delivery_id": f"d-{number}", "data": invoice(f"R-{number}")}
            answer = api.post("/api/v1/events", json=event)
            assert answer.status_code == 201, answer.text
            keys.append(answer.json()["key"])
        # Sent again: a duplicate, which changes nothing and so announces nothing.
        assert api.post("/api/v1/events", json=event).status_code == 200

    cluster = start_cluster("notifying", env=cluster_env(standin))
    notifications = Operation.objects.filter(action=NOTIFY)
    wait_for(
        lambda: notifications.count() == 5 and not notifications.exclude(state=State.SUCCEEDED).exists(),
        timeout=120,
        clusters=(cluster,),
        describe=lambda: f"{list(notifications.values_list('state', 'attempts'))}; {len(receiver.received)} taken",
        message="the notifications were not all delivered once the receiver recovered",
    )

    taken = by_operation_and_event(receiver)
    assert set(taken) == {(key, "operation.due") for key in keys}
    assert all(len(ids) == 1 for ids in taken.values()), taken
    assert len(receiver.received) == 5 + 5, "each failure was tried again, and nothing more"
    answered = {json.loads(done.body)["data"]["key"] for done in receiver.answered}
    assert answered == set(keys)
    assert {notification.payload["about"] for notification in notifications} == set(keys)
