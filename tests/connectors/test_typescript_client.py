"""The TypeScript client (opsconsole-client, built and installed from its `npm pack` tarball) in a
plain Node process (tests/connectors/typescript_flow.mjs), against a real gunicorn and PostgreSQL
(and a real qcluster's reconciliation where the lookup decides), calling a vendor that takes no
idempotency key: json-server, our key in the invoice's body for the lookup, its faults injected. The
action is a caller action declared as a file would declare it (performed_by: caller, a lookup at
the vendor). Each test counts the vendor's records.

- the same trigger twice: one invoice; the second run is answered done with its id;
- a list claimed in one batch: each item as alone (a key twice: the first acts), again: all done;
- two processes racing one key: one acts, the other is told in_progress, waits, then is answered done;
- the script SIGKILLed after the vendor created the invoice and before the report: one invoice; the
  operation is unknown after the lease, a claim does not act, the file's lookup finds the invoice, and
  the next run is answered done with it;
- a vendor that answers after the script's timeout: unknown, never failed (the invoice exists);
- a 429 with Retry-After: failed (transient), claimed again after it and created once, both tries
  with the same key;
- a 400: failed (permanent), needs review: a person decides; no invoice.
"""

import time

import pytest
from django.utils import timezone

from ledger.integrations import configured, file
from ledger.models import Attempt, AttemptOutcome, AuditEvent, Operation
from ledger.states import State
from tests.connectors.typescript import Flow, installed_client
from tests.faults.gunicorn import running_gunicorn
from tests.faults.qcluster import wait_for
from tests.third_party import running_json_server

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

ACTION = "issue-invoice"
LEASE_SECONDS = 5  # the crash's (the smallest the API allows)


def caller_action(vendor_url: str) -> dict:
    """The integrations file's document: a vendor without idempotency keys, asked by our key."""
    return {
        "destinations": [{"slug": "billing-vendor", "base_url": vendor_url, "timeout_seconds": 5}],
        "http_actions": [
            {
                "name": ACTION,
                "destination": "billing-vendor",
                "performed_by": "caller",
                "claim_lease_seconds": 30,
                "schema": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["invoice_id", "customer_id", "amount_cents"],
                    "properties": {
                        "invoice_id": {"type": "string", "minLength": 1, "maxLength": 100},
                        "customer_id": {"type": "string", "minLength": 1, "maxLength": 100},
                        "amount_cents": {"type": "integer", "minimum": 1},
                    },
                },
                "identity_fields": ["invoice_id"],
                "normalisers": {"invoice_id": "identifier"},
                "fingerprint_fields": ["invoice_id", "customer_id", "amount_cents"],
                "summary": "invoice {invoice_id}",
                "max_attempts": 5,
                "backoff_base_seconds": 1,
                "backoff_cap_seconds": 2,
                "settle_after_seconds": 1,
                "lookup": {"path": "/invoices?idempotency_key={{ key }}"},
            }
        ],
    }


@pytest.fixture(scope="module")
def client_directory(tmp_path_factory):
    return installed_client(tmp_path_factory.mktemp("a-flow"))


@pytest.fixture
def vendor(tmp_path):
    with running_json_server(tmp_path, {"invoices": []}) as server:
        yield server


@pytest.fixture
def flow(workspace, token, gunicorn, vendor, client_directory):
    """The caller action applied at this test's vendor and seen by every server process; the
    script's runner pointed at both."""
    file.apply(caller_action(vendor.url), actor="test")
    # Each server process reads the configured actions again at most this long after a change.
    time.sleep(configured.Loaded.REFRESH_SECONDS + 0.1)
    return Flow(client_directory, server_url=gunicorn.url, vendor_url=vendor.url, token=token, action=ACTION)


def invoice(invoice_id: str) -> dict:
    return {"invoice_id": invoice_id, "customer_id": "C-7", "amount_cents": 2500}


def answers(lines: list[dict]) -> list[dict]:
    return [line for line in lines if line["event"] == "answer"]


def only(lines: list[dict], event: str) -> dict:
    [line] = [line for line in lines if line["event"] == event]
    return line


def vendor_posts(vendor) -> list[dict]:
    return [request for request in vendor.requests() if (request["method"], request["path"]) == ("POST", "/invoices")]


def test_the_same_trigger_twice_creates_one_invoice(flow, vendor):
    first = only(flow.run("once", invoice("INV-1")), "answer")
    assert (first["performed"], first["httpStatus"], first["status"], first["externalId"]) == (True, 201, "done", "1")

    second = only(flow.run("once", invoice("INV-1")), "answer")
    assert (second["performed"], second["httpStatus"], second["status"], second["externalId"]) == (
        False,
        200,
        "done",
        "1",
    )

    assert len(vendor.db()["invoices"]) == 1
    operation = Operation.objects.get()
    assert (operation.state, operation.external_id, operation.result) == (State.SUCCEEDED, "1", {"invoice": 1})
    assert vendor.db()["invoices"][0]["idempotency_key"] == operation.key


def test_a_batch_claims_each_item_as_alone_and_a_rerun_creates_nothing_more(flow, vendor):
    """claimBatch: one request for the list; the first of two items with one key acts, the second
    is told in_progress; an invalid item is refused on its own; the same list again is all done."""
    items = [invoice("INV-20"), invoice("INV-21"), invoice("INV-20"), {"invoice_id": "INV-22"}]

    first = flow.run("batch", items)
    performed = {line["place"]: (line["performed"], line["status"]) for line in answers(first)}
    assert performed == {0: (True, "done"), 1: (True, "done"), 2: (False, "in_progress")}
    assert [(line["place"], line["httpStatus"], line["reason"]) for line in first if line["event"] == "refused"] == [
        (3, 422, "invalid_input")
    ]
    assert len(vendor.db()["invoices"]) == 2

    again = flow.run("batch", items)
    assert {line["place"]: (line["performed"], line["status"]) for line in answers(again)} == {
        0: (False, "done"),
        1: (False, "done"),
        2: (False, "done"),
    }
    assert len(vendor.db()["invoices"]) == 2
    assert len(vendor_posts(vendor)) == 2
    assert set(Operation.objects.values_list("state", flat=True)) == {State.SUCCEEDED}


def test_a_list_longer_than_the_servers_batch_goes_again_in_pieces(
    workspace, token, vendor, client_directory, tmp_path
):
    """A server whose OPSCONSOLE_MAX_CLAIM_BATCH is below the list refuses it whole, naming its
    limit (413 batch_too_large, nothing looked at); claimBatch sends it again in batches of that
    limit, and every item is answered as alone."""
    file.apply(caller_action(vendor.url), actor="test")
    with running_gunicorn(tmp_path, env={"OPSCONSOLE_MAX_CLAIM_BATCH": "2"}) as small:
        flow = Flow(client_directory, server_url=small.url, vendor_url=vendor.url, token=token, action=ACTION)
        lines = flow.run("batch", [invoice("INV-30"), invoice("INV-31"), invoice("INV-32")])
        batches = [line["status"] for line in small.access_lines() if line["message"].endswith("/api/v1/claims/batch")]

    assert {line["place"]: (line["performed"], line["status"]) for line in answers(lines)} == {
        0: (True, "done"),
        1: (True, "done"),
        2: (True, "done"),
    }
    assert batches == [413, 200, 200]
    assert len(vendor.db()["invoices"]) == 3


def test_two_processes_racing_one_key_one_acts_the_other_waits_then_is_answered_done(flow, vendor, tmp_path):
    go = tmp_path / "go"
    racers = [flow.start("until-done", invoice("INV-2"), GO_FILE=str(go)) for _ in range(2)]
    try:
        for racer in racers:
            racer.wait_for_line(lambda line: line["event"] in ("acting", "answer"), message="a first answer")
        [winner] = [racer for racer in racers if any(line["event"] == "acting" for line in racer.lines)]
        [loser] = [racer for racer in racers if racer is not winner]
        told = loser.wait_for_line(lambda line: line["event"] == "answer", message="the loser's answer")
        assert (told["performed"], told["httpStatus"], told["status"]) == (False, 409, "in_progress")
        go.touch()  # the winner calls the vendor now
        won, lost = winner.finish(), loser.finish()
    finally:
        for racer in racers:
            if racer.process.poll() is None:
                racer.kill()

    assert [(line["performed"], line["status"]) for line in answers(won)] == [(True, "done")]
    assert not any(line["event"] == "acting" for line in lost), "the loser never acted"
    statuses = [line["status"] for line in answers(lost)]
    assert statuses[0] == "in_progress", statuses
    assert statuses[-1] == "done", statuses
    assert set(statuses) <= {"in_progress", "done"}
    assert answers(lost)[-1]["externalId"] == answers(won)[0]["externalId"] == "1"
    assert len(vendor.db()["invoices"]) == 1
    assert len(vendor_posts(vendor)) == 1


def test_a_script_killed_after_the_vendor_acted_is_unknown_then_found_by_the_lookup(flow, vendor, start_cluster):
    data = invoice("INV-3")
    crashing = flow.start("crash", data, LEASE_SECONDS=str(LEASE_SECONDS))
    try:
        acted = crashing.wait_for_line(lambda line: line["event"] == "acted", message="the invoice created")
    finally:
        crashing.kill()
    assert [invoice["id"] for invoice in vendor.db()["invoices"]] == [int(acted["id"])]
    operation = Operation.objects.get()
    time.sleep(max(0.0, (operation.lease_expires_at - timezone.now()).total_seconds()) + 0.5)

    after_the_lease = only(flow.run("once", data), "answer")
    assert (after_the_lease["performed"], after_the_lease["httpStatus"], after_the_lease["status"]) == (
        False,
        409,
        "unknown",
    ), "nobody acts again by themselves"
    assert AuditEvent.objects.filter(operation=operation, kind="lease_expired").count() == 1

    reconciler = start_cluster("reconciler")
    wait_for(
        lambda: Operation.objects.get(pk=operation.pk).state == State.SUCCEEDED,
        timeout=90,
        clusters=(reconciler,),
        describe=lambda: f"state {Operation.objects.get(pk=operation.pk).state}",
        message="the cluster's reconciliation did not find the invoice by the file's lookup",
    )
    done = only(flow.run("once", data), "answer")
    assert (done["performed"], done["httpStatus"], done["status"], done["externalId"]) == (
        False,
        200,
        "done",
        acted["id"],
    )
    assert AuditEvent.objects.filter(operation=operation, kind="reconciled_found").count() == 1
    assert len(vendor.db()["invoices"]) == 1
    assert len(vendor_posts(vendor)) == 1


def test_a_vendor_timeout_is_unknown_never_failed(flow, vendor):
    vendor.fail_next("POST /invoices", "delay_answer", ms=4000)
    lines = flow.run("once", invoice("INV-4"), VENDOR_TIMEOUT_MS="500")

    error = only(lines, "error")
    assert (error["name"], error["reported"], error["status"]) == ("TimeoutError", "unknown", "unknown")
    operation = Operation.objects.get()
    assert operation.state == State.UNKNOWN
    outcomes = list(Attempt.objects.filter(operation=operation).values_list("outcome", flat=True))
    assert outcomes == [AttemptOutcome.AMBIGUOUS]
    again = only(flow.run("once", invoice("INV-4")), "answer")
    assert (again["performed"], again["status"]) == (False, "unknown")
    # The vendor logs the request when its late answer is sent.
    wait_for(lambda: vendor_posts(vendor), timeout=30, message="the vendor's late answer")
    assert len(vendor.db()["invoices"]) == 1, "the vendor acted: the outcome was rightly unknown"
    assert [post.get("delayed_ms") for post in vendor_posts(vendor)] == [4000], "never sent again"


def test_a_429_with_retry_after_is_retried_once_with_the_same_key(flow, vendor):
    vendor.fail_next("POST /invoices", "status", status=429, headers={"Retry-After": "1"})
    lines = flow.run("until-done", invoice("INV-5"))

    error = only(lines, "error")
    assert (error["name"], error["reported"], error["status"]) == ("VendorCallError", "failed", "retry_later")
    assert [(line["performed"], line["status"]) for line in answers(lines)][-1] == (True, "done")
    assert {line["status"] for line in answers(lines)[:-1]} <= {"retry_later"}
    posts = vendor_posts(vendor)
    assert [post["status"] for post in posts] == [429, 201]
    operation = Operation.objects.get()
    assert {post["idempotency_key"] for post in posts} == {operation.key}
    assert len(vendor.db()["invoices"]) == 1
    assert operation.state == State.SUCCEEDED
    outcomes = list(Attempt.objects.filter(operation=operation).order_by("id").values_list("outcome", flat=True))
    assert outcomes == [AttemptOutcome.TRANSIENT, AttemptOutcome.OK]


def test_a_400_needs_a_person(flow, vendor):
    vendor.fail_next("POST /invoices", "status", status=400)
    error = only(flow.run("once", invoice("INV-6")), "error")
    assert (error["name"], error["reported"], error["status"]) == ("VendorCallError", "failed", "needs_review")

    again = only(flow.run("once", invoice("INV-6")), "answer")
    assert (again["performed"], again["httpStatus"], again["status"]) == (False, 409, "needs_review")
    assert Operation.objects.get().state == State.NEEDS_REVIEW
    assert vendor.db()["invoices"] == []
    assert [post["status"] for post in vendor_posts(vendor)] == [400]
