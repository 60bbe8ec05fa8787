"""The Python client's management routes (clients/python: opsconsole_claims.management) against the
real app: every request goes through Django's URL routing, authentication, the ninja views and the
services on PostgreSQL, in this process (httpx hands it to Django's test client), so each method
is shown to reach its route and read its real answer, and each refusal to raise `Refused` with the
server's reason. tests/faults/test_claims_processes.py runs the client over the network, against
gunicorn."""

import httpx
import pytest
from django.test import Client
from opsconsole_claims import Ledger, Refused

from ledger.engine.processing import process_due_operations
from ledger.models import Approval, AuditEvent, Conflict, Control, Operation
from tests.conftest import R42, event, external_event

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}
INVOICE = {"request_id": "INV-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


class DjangoTransport(httpx.BaseTransport):
    """httpx's requests served by the app through Django's test client: the path as sent (its
    percent-encoding decoded by the handler, as a WSGI server's is), the headers, the body."""

    def __init__(self, client: Client):
        self.client = client

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        skipped = {"host", "content-length", "content-type"}
        headers = {name: value for name, value in request.headers.items() if name.lower() not in skipped}
        answer = self.client.generic(
            request.method,
            request.url.raw_path.decode("ascii"),
            request.read(),
            content_type=request.headers.get("content-type", ""),
            headers=headers,
        )
        return httpx.Response(answer.status_code, headers=dict(answer.headers), content=answer.content)


@pytest.fixture
def ledger_of(caller):
    """``ledger_of("approver")``: the client with a token of that person's (every scope unless
    ``scopes``); ``ledger_of()``: a machine's. Not retried: the app answers every request here."""

    def make(username: str | None = None, scopes=None) -> Ledger:
        token = caller(username, scopes).token
        return Ledger("http://testserver", token, max_retries=0, transport=DjangoTransport(Client()))

    return make


@pytest.fixture
def machine(ledger_of) -> Ledger:
    return ledger_of()


def refused(call, status: int, reason: str = "") -> Refused:
    with pytest.raises(Refused) as raised:
        call()
    assert (raised.value.http_status, raised.value.reason) == (status, reason), raised.value.body
    return raised.value


# --- submitting and reading -----------------------------------------------------------------------


def test_an_event_is_accepted_then_a_duplicate_and_read_in_the_list_and_on_its_page(machine, workspace):
    accepted = machine.submit_event("issue-refund", REFUND, delivery_id="d-1")
    again = machine.submit_event("issue-refund", REFUND, delivery_id="d-1")

    assert (accepted["status"], again["status"]) == ("accepted", "duplicate")
    assert accepted["key"] == again["key"] == Operation.objects.get().key
    page = machine.operations(state="pending_approval", action="issue-refund", limit=10)
    assert [item["key"] for item in page["operations"]] == [accepted["key"]]
    assert page["next_cursor"] is None
    detail = machine.operation(accepted["key"])
    assert (detail["key"], detail["state"]) == (accepted["key"], "pending_approval")
    assert detail["fingerprint"] == "••••"  # the refund's customer is sensitive: a machine reads it masked
    deliveries = [(delivery["sender_delivery_id"], delivery["outcome"]) for delivery in detail["deliveries"]]
    assert deliveries == [("d-1", "accepted"), ("d-1", "duplicate")]


def test_a_key_with_slashes_spaces_and_percent_signs_reaches_its_operation(machine, ledger_of, alice, workspace):
    """The key's request id is percent-encoded inside the key ("B%2F1..."): the client encodes the
    key again as one path segment, so the server reads back the very key."""
    key = machine.submit_event("prepare-brief", R42 | {"request_id": "B/1 ?#%"})["key"]
    assert "%2F" in key

    assert machine.operation(key)["key"] == key
    assert ledger_of("alice").take(key)["status"] == "taken"
    assert Operation.objects.get(key=key).assigned_to == alice


def test_a_batch_answers_each_event_on_its_own(machine, workspace):
    answer = machine.submit_batch(
        [
            {"action": "prepare-brief", "delivery_id": "d-1", "data": R42},
            {"action": "prepare-brief", "delivery_id": "d-2", "data": R42 | {"request_id": "R-43"}},
            {"action": "prepare-brief", "data": {"request_id": "R-44"}},
        ]
    )

    assert [result["http_status"] for result in answer["results"]] == [201, 201, 422]
    assert Operation.objects.count() == 2


def test_a_blocked_event_raises_refused_carrying_the_conflict_then_it_is_applied(machine, reviewer, ledger_of):
    machine.submit_event("prepare-brief", R42, delivery_id="d-1")

    conflict = refused(
        lambda: machine.submit_event("prepare-brief", R42 | {"title": "Another"}, delivery_id="d-2"),
        409,
        "payload_conflict",
    )
    applied = ledger_of("operator").apply_conflict(conflict.body["conflict_id"], reason="the new title is meant")

    assert applied["status"] == "applied"
    assert applied["operation"]["payload"]["title"] == "Another"
    assert Conflict.objects.get().status == "applied"


def test_a_conflict_is_dismissed_and_a_second_decision_refused(machine, reviewer, ledger_of):
    machine.submit_event("prepare-brief", R42, delivery_id="d-1")
    conflict_id = refused(
        lambda: machine.submit_event("prepare-brief", R42 | {"title": "Another"}, delivery_id="d-2"),
        409,
        "payload_conflict",
    ).body["conflict_id"]
    operator = ledger_of("operator")

    assert operator.dismiss_conflict(conflict_id, reason="a retry of the old payload")["status"] == "dismissed"
    refused(lambda: operator.apply_conflict(conflict_id, reason="meant"), 409, "wrong_state")
    refused(lambda: operator.dismiss_conflict(999999, reason="x"), 404)


def test_every_operation_reads_every_page_and_a_bad_filter_is_refused_by_name(machine, workspace):
    for n in range(5):
        machine.submit_event("prepare-brief", R42 | {"request_id": f"R-{n}"})

    keys = [item["key"] for item in machine.every_operation(state="any", limit=2)]

    assert sorted(keys) == sorted(Operation.objects.values_list("key", flat=True))
    assert len(keys) == 5
    bad = refused(lambda: machine.operations(action="no-such-action"), 422, "invalid_input")
    assert bad.errors[0]["field"] == "action"
    refused(lambda: machine.operation("demo:nothing:v1:prepare-brief"), 404)


# --- deciding -------------------------------------------------------------------------------------


def test_an_approver_approves_with_the_fingerprint_read_and_a_stale_one_is_refused(machine, approver, ledger_of):
    key = machine.submit_event("issue-refund", REFUND)["key"]
    ann = ledger_of("approver")
    fingerprint = ann.operation(key)["fingerprint"]

    stale = refused(lambda: ann.approve(key, fingerprint="0" * 64), 409, "stale_fingerprint")
    approved = ann.approve(key, fingerprint=fingerprint, reason="matches the ticket")

    assert stale.body["state"] == "pending_approval"
    assert (approved["status"], approved["operation"]["state"]) == ("approved", "pending")
    assert Approval.objects.get().approver == "approver"
    refused(lambda: ann.approve(key, fingerprint=fingerprint), 409, "wrong_state")


def test_a_rejection_and_the_refusals_of_who_asks(machine, person, approver, ledger_of):
    person("submitter", "approver")
    own = ledger_of("submitter").submit_event("issue-refund", REFUND)["key"]
    fingerprint = Operation.objects.get(key=own).fingerprint

    refused(lambda: ledger_of("submitter").approve(own, fingerprint=fingerprint), 403, "four_eyes")
    refused(lambda: machine.reject(own, fingerprint=fingerprint, reason="no"), 403, "missing_scope")
    refused(lambda: ledger_of("approver", scopes=["read"]).approve(own, fingerprint=fingerprint), 403, "missing_scope")
    rejected = ledger_of("approver").reject(own, fingerprint=fingerprint, reason="duplicate of R-6")

    assert (rejected["status"], rejected["operation"]["state"]) == ("rejected", "rejected")


@pytest.fixture
def refused_notice(workspace, standin, machine):
    """A send-notice the destination refused for good (422): needs review."""
    standin.fail_next({"kind": "status", "status": 422})
    key = machine.submit_event(**_event(external_event()))["key"]
    process_due_operations()
    assert Operation.objects.get(key=key).state == "needs_review"
    return key


def _event(raw: dict) -> dict:
    return {"action": raw["action"], "data": raw["data"], "delivery_id": raw["delivery_id"]}


def test_a_machine_replays_what_needs_review_and_a_second_replay_is_refused(machine, refused_notice):
    replayed = machine.replay(refused_notice, reason="template fixed")

    assert replayed["status"] == "replayed"
    assert AuditEvent.objects.filter(kind="replayed", actor__startswith="token:").count() == 1
    again = refused(lambda: machine.replay(refused_notice, reason="twice"), 409, "wrong_state")
    assert again.body["state"] == replayed["operation"]["state"]


def test_an_unknown_operation_is_resolved_with_the_record_found(machine, unknown_notice):
    resolved = machine.resolve(unknown_notice.key, external_id="rec_81", note="seen in the vendor dashboard")

    assert (resolved["status"], resolved["operation"]["state"]) == ("resolved", "succeeded")
    unknown_notice.refresh_from_db()
    assert unknown_notice.external_id == "rec_81"


def test_a_pending_operation_is_cancelled_and_a_blank_reason_refused(machine, workspace):
    key = machine.submit_event(**_event(event()))["key"]

    blank = refused(lambda: machine.cancel(key, reason=" "), 422, "invalid_input")
    cancelled = machine.cancel(key, reason="sent by mistake")

    assert blank.errors[0]["field"] == "reason"
    assert (cancelled["status"], cancelled["operation"]["state"]) == ("cancelled", "cancelled")


def test_a_person_takes_takes_over_and_gives_back_and_a_machine_may_not(machine, alice, bob, ledger_of):
    key = machine.submit_event(**_event(event()))["key"]
    as_alice, as_bob = ledger_of("alice"), ledger_of("bob")

    assert as_alice.take(key)["status"] == "taken"
    assert as_alice.take(key)["status"] == "unchanged"
    refused(lambda: as_bob.take(key), 409, "held_by_someone_else")
    assert as_bob.take(key, take_over=True)["operation"]["assigned_to"] == "bob"
    assert as_bob.release(key)["status"] == "released"
    assert as_bob.release(key)["status"] == "unchanged"
    refused(lambda: machine.take(key), 403, "person_only")


# --- pauses ---------------------------------------------------------------------------------------


def test_a_machine_pauses_an_action_lists_it_and_resumes_it_once(machine, workspace):
    pulled = machine.pause(scope="action", action="prepare-brief", reason="vendor incident INC-42")

    [pause] = pulled["pauses"]
    assert (pause["scope"], pause["action"], pause["workspace"]) == ("action", "prepare-brief", "demo")
    assert [listed["id"] for listed in machine.pauses()["pauses"]] == [pause["id"]]
    resumed = machine.resume(pause["id"])
    assert resumed["status"] == "resumed"
    assert machine.pauses()["pauses"] == []
    refused(lambda: machine.resume(pause["id"]), 404)
    assert not Control.objects.filter(paused=True).exists()


def test_a_pause_of_nothing_is_refused_naming_the_field(machine, workspace):
    bad = refused(lambda: machine.pause(scope="destination", destination="nowhere", reason="x"), 422, "invalid_input")

    assert bad.errors[0]["field"] == "destination"


# --- due work, claimed by key ---------------------------------------------------------------------


@pytest.mark.usefixtures("send_invoice_action")
def test_due_work_is_listed_claimed_by_key_with_its_data_and_reported(machine, workspace):
    key = machine.submit_event("send-invoice", INVOICE, delivery_id="inv-7")["key"]

    [due] = machine.due(action="send-invoice", limit=10)["operations"]
    claim = machine.claim_by_key(due["key"], lease_seconds=30)
    waiting = machine.claim_by_key(key)
    claim.succeeded(external_id="rec-7", result={"number": "N-7"})
    done = machine.claim_by_key(key)

    assert due["key"] == key
    assert (claim.should_act, claim.data, claim.idempotency_key) == (True, INVOICE, key)
    assert (waiting.should_act, waiting.status) == (False, "in_progress")
    assert (done.status, done.external_id, done.result) == ("done", "rec-7", {"number": "N-7"})
    assert machine.due()["operations"] == []
    refused(lambda: machine.claim_by_key("demo:nothing:v1:send-invoice"), 404)
    refused(lambda: machine.due(limit=0), 422, "invalid_input")
