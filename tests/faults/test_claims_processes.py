"""The claims API used the way a flow's own script uses it: the Python client (clients/python) in a
process of its own (tests/faults/claimer.py), against gunicorn as `make serve` runs it, on
PostgreSQL, with a real stand-in destination. The action is the demo's `send-invoice`, declared
only in its integrations file (examples/integrations.yaml): no Python defines it.

- 32 claimers of one key at once: exactly one is told to act (201), the other 31 to defer (409
  in_progress); once it reports, every later claim is answered done with the recorded result.
- A claimer SIGKILLed after creating its record at the destination and before reporting: once its
  lease has passed the operation is unknown and a new claim is answered unknown (nobody acts again);
  a real qcluster's reconciliation asks the destination at the file's lookup, finds the one record,
  and the operation succeeds: the next claim is done with that record.
- A claimer SIGKILLed before acting: unknown after its lease, the lookup finds nothing, and the
  operation is retrying, waiting for its caller's claim (no worker performs it); the next claim
  acts under the same key.
- The client's heartbeat keeps a claim past its first lease; a claim that let its lease pass is
  refused as stale (ClaimLost) and records nothing.
- Due work listed, claimed by its key and reported, the operation read and a pause pulled and
  released, through the client's other routes.
"""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from opsconsole_claims import ClaimLost, Ledger

from ledger.core import accounts
from ledger.integrations import configured
from ledger.models import Attempt, AuditEvent, Operation
from ledger.states import State
from tests import configured as integrations
from tests.faults.gunicorn import running_gunicorn
from tests.faults.qcluster import PROJECT_DIR, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

CLAIMER = Path(__file__).with_name("claimer.py")
CLAIMERS = 32
LEASE_SECONDS = 5  # the crash claimer's (the smallest the API allows)


@pytest.fixture(scope="module")
def gunicorn(django_db_setup, django_db_blocker, tmp_path_factory):
    """One server for the module, as `make serve` runs it (starting one is a good part of a test's
    time); each test's rows are its own (``server``)."""
    with django_db_blocker.unblock():
        with running_gunicorn(tmp_path_factory.mktemp("gunicorn")) as running:
            yield running


@pytest.fixture
def server(gunicorn, transactional_db, standin):
    """The module's server, the demo's send-invoice applied from its integrations file at this
    test's stand-in (settling in a second: a claim's request lands at once here)."""
    integrations.apply_send_invoice(standin.url, settle_after_seconds=1)
    # Each server process reads the configured actions again when it next looks, at most this long
    # after the change (ledger.integrations.configured): from then on, its next request sees it.
    time.sleep(configured.Loaded.REFRESH_SECONDS + 0.1)
    return gunicorn


def invoice(request_id: str) -> dict:
    return {"request_id": request_id, "version": 1, "customer_id": "C-7", "amount_cents": 2500, "currency": "EUR"}


def claimer_env(token: str) -> dict[str, str]:
    """The client from this tree, whichever checkout the virtualenv's editable install points to."""
    source = str(PROJECT_DIR / "clients" / "python" / "src")
    return os.environ | {"OPSCONSOLE_TOKEN": token, "PYTHONPATH": source, "PYTHONUNBUFFERED": "1"}


def test_32_claimers_in_another_process_one_acts_the_others_defer_then_all_read_done(workspace, token, server):
    data = invoice("R-race")

    finished = subprocess.run(
        [sys.executable, str(CLAIMER), "race", server.url, json.dumps(data), str(CLAIMERS)],
        env=claimer_env(token),
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert finished.returncode == 0, f"{finished.stderr}\n{server.log_tail()}"
    answers = json.loads(finished.stdout.strip().splitlines()[-1])

    first = Counter((answer["http"], answer["status"]) for answer in answers["first"])
    assert first == {(201, "claimed"): 1, (409, "in_progress"): CLAIMERS - 1}
    (winner,) = [answer for answer in answers["first"] if answer["http"] == 201]
    assert winner["after"] == "done", "its report was recorded"
    later = answers["later"]
    assert len(later) == CLAIMERS
    (winner_result,) = {json.dumps(answer["result"], sort_keys=True) for answer in later}
    assert {(answer["http"], answer["status"], answer["external_id"]) for answer in later} == {
        (200, "done", "rec-race")
    }
    assert json.loads(winner_result)["invoice"] == "INV-1"
    operation = Operation.objects.get()
    assert (operation.state, operation.external_id) == (State.SUCCEEDED, "rec-race")
    assert operation.result == json.loads(winner_result)
    assert Attempt.objects.filter(operation=operation).count() == 1, "one try, the winner's"


def test_a_claimer_killed_after_acting_is_unknown_after_its_lease_and_found_by_the_files_lookup(
    workspace, token, standin, server, start_cluster
):
    data = invoice("R-crash")
    acted = killed_claimer("crash", server, token, data, standin, says="acted ")
    record_id = acted.split()[1]
    operation = Operation.objects.get()
    wait_past_the_lease(operation)

    with Ledger(server.url, token) as ledger:
        after_the_lease = ledger.claim("send-invoice", data)
        assert (after_the_lease.http_status, after_the_lease.status) == (409, "unknown")
        assert not after_the_lease.should_act
        assert ledger.claim("send-invoice", data).status == "unknown", "nobody acts again by themselves"
        assert [record["id"] for record in standin.records()] == [record_id]
        assert AuditEvent.objects.filter(operation=operation, kind="lease_expired").count() == 1

        reconciler = start_cluster("reconciler")
        wait_for(
            lambda: Operation.objects.get(pk=operation.pk).state == State.SUCCEEDED,
            timeout=60,
            clusters=(reconciler,),
            describe=lambda: f"state {Operation.objects.get(pk=operation.pk).state}",
            message="the cluster's reconciliation did not find the record by the file's lookup",
        )
        done = ledger.claim("send-invoice", data)

    assert (done.http_status, done.status, done.external_id) == (200, "done", record_id)
    found = AuditEvent.objects.get(operation=operation, kind="reconciled_found")
    assert (found.actor, found.message) == ("reconciler", f"the destination has record {record_id}")
    assert standin.requests("GET /records") >= 1, "asked at the file's lookup, GET /records?idempotency_key="
    assert len(standin.records()) == 1


def test_a_claimer_killed_before_acting_is_found_absent_and_waits_for_its_callers_claim(
    workspace, token, standin, server, start_cluster
):
    data = invoice("R-vanished")
    key = killed_claimer("vanish", server, token, data, standin, says="claimed ").split()[1]
    operation = Operation.objects.get(key=key)
    wait_past_the_lease(operation)

    with Ledger(server.url, token) as ledger:
        assert ledger.claim("send-invoice", data).status == "unknown"
        reconciler = start_cluster("reconciler")
        wait_for(
            lambda: Operation.objects.get(pk=operation.pk).state == State.RETRYING,
            timeout=60,
            clusters=(reconciler,),
            describe=lambda: f"state {Operation.objects.get(pk=operation.pk).state}",
            message="the cluster's reconciliation did not find the record absent",
        )
        absent = AuditEvent.objects.get(operation=operation, kind="reconciled_absent")
        assert absent.message == (
            "the destination confirms no record; its caller may claim it again under the same key"
        )
        # Never a worker's: it stays retrying, waiting for its caller's claim.
        time.sleep(2)
        operation.refresh_from_db()
        assert (operation.state, operation.attempts) == (State.RETRYING, 1)
        assert standin.records() == []

        again = ledger.claim("send-invoice", data, lease_seconds=LEASE_SECONDS)
        assert (again.http_status, again.status, again.should_act) == (201, "claimed", True)
        assert (again.idempotency_key, again.answer["attempt"]) == (key, 2)
        again.succeeded(external_id="rec-2")
    assert Operation.objects.get(pk=operation.pk).state == State.SUCCEEDED


def killed_claimer(mode: str, server, token: str, data: dict, standin, *, says: str) -> str:
    """Run the claimer in ``mode`` until it prints what it did, then SIGKILL it: that line."""
    claimer = subprocess.Popen(
        [sys.executable, str(CLAIMER), mode, server.url, json.dumps(data), standin.url],
        env=claimer_env(token),
        cwd=PROJECT_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = claimer.stdout.readline()
        assert line.startswith(says), f"{line}{claimer.stderr.read() if claimer.poll() else ''}{server.log_tail()}"
    finally:
        claimer.send_signal(signal.SIGKILL)
        claimer.wait(timeout=10)
    return line


def wait_past_the_lease(operation: Operation) -> None:
    operation.refresh_from_db()
    time.sleep(max(0.0, (operation.lease_expires_at - timezone.now()).total_seconds()) + 0.5)


def test_the_client_keeps_its_lease_by_heartbeat_and_a_lease_it_lost_records_nothing(workspace, token, server):
    with Ledger(server.url, token, heartbeat_every=0.5) as ledger:
        kept = ledger.claim("send-invoice", invoice("R-kept"), lease_seconds=LEASE_SECONDS)
        lost = ledger.claim("send-invoice", invoice("R-lost"), lease_seconds=LEASE_SECONDS)  # no block, no heartbeat
        with kept:
            claimed_until = kept.lease_expires_at
            time.sleep(LEASE_SECONDS + 1)
            assert kept.lease_expires_at > claimed_until + timedelta(seconds=LEASE_SECONDS / 2)
            assert not kept.lost
            kept.succeeded(external_id="rec-kept", result={"invoice": "INV-kept"})

        with pytest.raises(ClaimLost):
            lost.succeeded(external_id="rec-lost", result={"invoice": "INV-lost"})

    assert Operation.objects.get(key=kept.key).state == State.SUCCEEDED
    lost_operation = Operation.objects.get(key=lost.key)
    assert (lost_operation.state, lost_operation.external_id, lost_operation.result) == (State.UNKNOWN, "", None)


def test_due_work_is_claimed_by_key_over_the_network_and_a_flows_management_calls_answer(
    workspace, token, standin, server
):
    """The client's other routes through gunicorn (tests/api/test_python_client.py has each one
    through the app in process): an event from elsewhere is listed due, claimed by its key (its
    data, to send) in a heartbeating block, performed at the stand-in and reported; the operation
    read by its key; a pause pulled, listed and released by a machine token with `operate`."""
    operator = accounts.issue_token(
        workspace=workspace, name="incident-flow", actor="test", scopes=["events", "claims", "read", "operate"]
    )
    with Ledger(server.url, operator, heartbeat_every=0.5) as ledger:
        key = ledger.submit_event("send-invoice", invoice("R-due"), delivery_id="billing-1")["key"]
        [due] = ledger.due(action="send-invoice")["operations"]
        with ledger.claim_by_key(due["key"], lease_seconds=LEASE_SECONDS) as claim:
            assert (claim.should_act, claim.data) == (True, invoice("R-due"))
            record = standin.create(claim.idempotency_key, claim.data)
            claim.succeeded(external_id=record["id"])
        page = ledger.operation(key)
        pulled = ledger.pause(scope="action", action="send-invoice", reason="vendor incident INC-42")["pauses"]
        held = ledger.claim("send-invoice", invoice("R-held"))
        listed = ledger.pauses()["pauses"]
        resumed = ledger.resume(pulled[0]["id"])

    assert due["key"] == key
    assert (page["state"], page["external_id"]) == ("succeeded", record["id"])
    assert [(pause["scope"], pause["action"]) for pause in pulled] == [("action", "send-invoice")]
    assert (held.http_status, held.status, held.should_act) == (423, "held", False)
    assert [pause["id"] for pause in listed] == [pulled[0]["id"]]
    assert resumed["status"] == "resumed"
    assert [found["id"] for found in standin.records()] == [record["id"]]
