"""The claims API used the way a flow's own script uses it: the Python client (clients/python) in a
process of its own (tests/faults/claimer.py), against gunicorn as `make serve` runs it, on
PostgreSQL, with a real stand-in destination.

- 32 claimers of one key at once: exactly one is told to act (201), the other 31 to defer (409
  in_progress); once it reports, every later claim is answered done with the recorded result.
- A claimer SIGKILLed after creating its record at the destination and before reporting: once its
  lease has passed the operation is unknown and a new claim is answered unknown (nobody acts again);
  the destination holds one record; a person resolving it in the console makes the next claim done.
- The client's heartbeat keeps a claim past its first lease; a claim that let its lease pass is
  refused as stale (ClaimLost) and records nothing.
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

from ledger.models import Attempt, AuditEvent, Operation
from ledger.states import State
from tests.faults.gunicorn import running_gunicorn
from tests.faults.qcluster import PROJECT_DIR

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
def server(gunicorn, transactional_db):
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


def test_a_claimer_killed_after_acting_leaves_it_unknown_until_a_person_resolves_it(
    workspace, token, standin, reviewer, client, server
):
    data = invoice("R-crash")
    claimer = subprocess.Popen(
        [sys.executable, str(CLAIMER), "crash", server.url, json.dumps(data), standin.url],
        env=claimer_env(token),
        cwd=PROJECT_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        acted = claimer.stdout.readline()
        assert acted.startswith("acted "), f"{acted}{claimer.stderr.read() if claimer.poll() else ''}"
    finally:
        claimer.send_signal(signal.SIGKILL)
        claimer.wait(timeout=10)
    record_id = acted.split()[1]
    operation = Operation.objects.get()
    time.sleep(max(0.0, (operation.lease_expires_at - timezone.now()).total_seconds()) + 0.5)

    with Ledger(server.url, token) as ledger:
        after_the_lease = ledger.claim("send-invoice", data)
        assert (after_the_lease.http_status, after_the_lease.status) == (409, "unknown")
        assert not after_the_lease.should_act
        assert ledger.claim("send-invoice", data).status == "unknown", "nobody acts again by themselves"
        assert [record["id"] for record in standin.records()] == [record_id]
        operation.refresh_from_db()
        assert operation.state == State.UNKNOWN
        assert AuditEvent.objects.filter(operation=operation, kind="lease_expired").count() == 1

        client.force_login(reviewer)
        response = client.post(
            f"/console/operations/{operation.pk}/resolve/",
            {"external_id": record_id, "reason": "found it at the stand-in by its idempotency key"},
        )
        assert response.status_code == 302, response.content[:500]

        done = ledger.claim("send-invoice", data)
    assert (done.http_status, done.status, done.external_id) == (200, "done", record_id)
    assert done.result["external_id"] == record_id
    assert len(standin.records()) == 1


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
