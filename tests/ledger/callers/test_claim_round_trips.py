"""A claim is one database call and one commit, as a single event is (docs/performance.md): the
queries a claim and its outcome send, counted through the API as a caller sends them, outside any
test transaction (autocommit, as served), so that the gain cannot silently regress. The token a
process has read before is checked inside the call (tests/api/test_token_at_reservation.py): no
lookup of it is sent."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from ledger.callers import claiming
from ledger.core import tallies
from ledger.core.audit_verify import verify_chains
from ledger.models import Attempt, AuditEvent, ConfigVersion, Operation, Workspace
from tests.ledger.callers.test_claims import claim_body

pytestmark = pytest.mark.django_db(transaction=True)


def sent(api, path, body) -> tuple[object, list[str]]:
    with CaptureQueriesContext(connection) as queries:
        response = api.post(path, body)
    return response, [str(query["sql"]) for query in queries.captured_queries]


def commits(statements: list[str]) -> int:
    return sum(statement.rstrip().upper().endswith("COMMIT") for statement in statements)


def test_a_claim_is_one_call_committed_with_its_audit_events(api, send_invoice_action):
    api.post("/api/v1/claims", claim_body(request_id="INV-0"))  # the connection and the caches warmed

    response, statements = sent(api, "/api/v1/claims", claim_body())

    assert response.status_code == 201, response.json()
    calls = [statement for statement in statements if "ledger_claim_request(" in statement]
    assert len(calls) == 1
    assert calls[0].startswith("BEGIN; SELECT ledger_claim_request(")
    assert statements[-1].startswith("SELECT ledger_audit_insert(")
    assert commits(statements) == 1
    # The call (checking the token), the events with the COMMIT: nothing compiled by the ORM.
    assert len(statements) == 2, statements


def rows_written(table: str, call) -> tuple[int, int]:
    """The rows of ``table`` ``call`` inserted and updated, in a transaction around it: the
    difference of PostgreSQL's counts (which hold, until its backend reports them, earlier
    transactions' too; it reports none inside a transaction)."""
    count = "SELECT n_tup_ins, n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = %s"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(count, [table])
        before = cursor.fetchone()
        call()
        cursor.execute(count, [table])
        after = cursor.fetchone()
    return after[0] - before[0], after[1] - before[1]


def operation_rows_written(call) -> tuple[int, int]:
    return rows_written("ledger_operation", call)


def test_a_claim_of_a_new_event_inserts_its_operation_claimed_and_never_updates_it(workspace, send_invoice_action):
    """One insert, in the claimed state: an insert then an update wrote each of the row's indexes
    twice. What is recorded is what the move from pending records."""
    answers = []

    written = operation_rows_written(
        lambda: answers.append(claiming.claim(workspace=workspace, raw=claim_body(), submitted_by="caller"))
    )

    assert written == (1, 0)
    assert [answer.status for answer in answers] == ["claimed"]
    operation = Operation.objects.get()
    assert (operation.state, operation.fencing_token, operation.attempts) == ("processing", 1, 1)
    assert (operation.lease_owner, operation.state_changed_at) == ("caller", operation.created_at)
    assert Attempt.objects.get().number == 1
    events = AuditEvent.objects.filter(operation=operation).order_by("id")
    assert [(event.kind, event.from_state, event.to_state) for event in events] == [
        ("reserved", "", "pending"),
        ("claimed", "pending", "processing"),
    ]


def chain_heads_read(call) -> int:
    """How many times ``call`` read an audit chain's head (``ledger_chain_head``), counted by
    PostgreSQL for the transaction around it (``track_functions``, set for it alone)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL track_functions = 'pl'")
        call()
        cursor.execute(
            "SELECT coalesce(pg_stat_get_xact_function_calls('ledger_chain_head(bigint, integer)'::regprocedure), 0)"
        )
        return cursor.fetchone()[0]


@pytest.mark.parametrize("lanes", [1, 4])
def test_a_claim_of_a_new_event_reads_its_chains_head_once(workspace, send_invoice_action, lanes):
    """The reservation's and the claim's events go on the operation's lane after the one head read
    for the reservation (nothing is inserted before the commit, so a second read finds the same)."""
    Workspace.objects.filter(pk=workspace.pk).update(audit_lanes=lanes)
    answers = []

    reads = chain_heads_read(
        lambda: answers.append(claiming.claim(workspace=workspace, raw=claim_body(), submitted_by="caller"))
    )

    assert [answer.status for answer in answers] == ["claimed"]
    assert reads == 1
    events = AuditEvent.objects.filter(operation=Operation.objects.get()).order_by("id")
    assert [event.kind for event in events] == ["reserved", "claimed"]
    assert len({event.lane for event in events}) == 1
    assert verify_chains().broken is None


def test_a_claim_of_a_recorded_event_updates_its_operation_once(workspace, send_invoice_action):
    claiming.claim(workspace=workspace, raw=claim_body(), submitted_by="caller")
    Operation.objects.update(state="retrying", lease_owner="", lease_expires_at=None)

    answers = []

    written = operation_rows_written(
        lambda: answers.append(claiming.claim(workspace=workspace, raw=claim_body(), submitted_by="caller"))
    )

    assert written == (0, 1)
    assert [answer.status for answer in answers] == ["claimed"]
    assert Operation.objects.values_list("state", "fencing_token", "attempts").get() == ("processing", 2, 2)


def test_a_claim_by_key_adds_only_the_lookup_of_its_action(api, send_invoice_action):
    key = api.post("/api/v1/events", claim_body()).json()["key"]

    response, statements = sent(api, "/api/v1/claims", {"key": key})

    assert response.status_code == 201, response.json()
    assert sum("ledger_claim_request(" in statement for statement in statements) == 1
    assert commits(statements) == 1
    # The lookup of its action, the call, the events with the COMMIT.
    assert len(statements) == 3, statements


def test_a_batch_of_claims_is_one_call_and_one_commit(api, send_invoice_action):
    api.post("/api/v1/claims", claim_body(request_id="INV-0"))
    items = [claim_body(request_id=f"INV-{n}") for n in range(1, 21)]

    response, statements = sent(api, "/api/v1/claims/batch", {"claims": items})

    assert [result["status"] for result in response.json()["results"]] == ["claimed"] * 20
    assert sum("ledger_claim_request(" in statement for statement in statements) == 1
    assert commits(statements) == 1
    assert len(statements) == 2, statements


@pytest.fixture
def other_caller_action(send_invoice_action, standin):
    """A second caller action beside `send-invoice`: the demo's, named `other-invoice`."""
    from ledger.integrations import file
    from opsconsole.management.commands.demo_setup import integrations_document

    document = integrations_document(standin.url)
    [action] = [action for action in document["http_actions"] if action["name"] == "send-invoice"]
    destinations = [each for each in document["destinations"] if each["slug"] == action["destination"]]
    actions = [action, action | {"name": "other-invoice"}]
    file.apply({"destinations": destinations, "http_actions": actions}, actor="test")


def other_caller_body(request_id: str) -> dict:
    return claim_body(request_id=request_id) | {"action": "other-invoice"}


def test_a_batch_sends_what_its_claims_of_one_action_share_once(api, send_invoice_action, other_caller_action):
    """The rows' templates, the configuration and the counter's labels once per action and request,
    not once per claim (a batch of 100 sent 445 kB where its claims' own parts are ~45)."""
    api.post("/api/v1/claims", claim_body(request_id="INV-0"))
    items = [claim_body(request_id=f"INV-{n}") for n in range(1, 21)]
    items.insert(5, other_caller_body("OTHER-1"))

    response, statements = sent(api, "/api/v1/claims/batch", {"claims": items})

    assert [result["status"] for result in response.json()["results"]] == ["claimed"] * 21
    [call] = [statement for statement in statements if "ledger_claim_request(" in statement]
    assert call.count('"tally_labels"') == 2  # one per action
    assert call.count('"fingerprint_fields"') == 2
    assert call.count('"key_recipe"') == 2  # the operation row's template
    assert call.count('"payload": {') == 21  # each claim's own event
    assert set(Operation.objects.values_list("action", flat=True)) == {"other-invoice", "send-invoice"}
    assert verify_chains().broken is None


def test_a_batch_counts_its_claims_once_per_answer(workspace, send_invoice_action):
    """One row written per answer's labels, however many claims the batch holds: each claim
    upserted the process's row, 30 updates of one row (and its old versions) for 30 claims."""
    claiming.claim(workspace=workspace, raw=claim_body(request_id="INV-0"), submitted_by="caller")
    raws = [claim_body(request_id=f"INV-{n}") for n in range(30)]  # INV-0 is in progress

    answers = []
    written = rows_written(
        "ledger_tally",
        lambda: answers.extend(claiming.claim_each(workspace=workspace, raws=raws, submitted_by="caller")),
    )

    assert [answer.status for answer in answers] == ["in_progress"] + ["claimed"] * 29
    assert sum(written) == 2  # the claimed row and the in-progress one, each written once
    totals = {labels: value for (name, labels), value in tallies.totals().items() if name == tallies.CLAIMS}
    assert totals['{"action": "send-invoice", "answer": "claimed"}'] == 30
    assert totals['{"action": "send-invoice", "answer": "in_progress"}'] == 1


def test_a_key_not_found_first_still_stores_the_configuration_its_batch_sent_it(
    workspace, send_invoice_action, monkeypatch
):
    """Found in review: the configuration travels with a request's first claim of the action only; a
    claim by key whose operation was purged between the lookup of its action and the call answered
    not found before storing it, and the batch's later claims opened attempts naming a
    configuration never stored (the commit failed)."""
    from ledger.intake import submit

    key = submit.submit_event(workspace=workspace, raw=claim_body(request_id="INV-1"), source="api").key
    gone = key.replace("INV-1", "INV-purged")
    monkeypatch.setattr(
        claiming, "_actions_of_keys", lambda workspace, raws: dict.fromkeys([gone, key], "send-invoice")
    )
    assert not ConfigVersion.objects.exists()

    answers = claiming.claim_each(workspace=workspace, raws=[{"key": gone}, {"key": key}], submitted_by="caller")

    assert [answer.status for answer in answers] == ["not_found", "claimed"]
    assert Attempt.objects.get().config_version_id == ConfigVersion.objects.get().digest


def test_a_succeeded_report_is_one_call_committed_with_its_audit_event(api, send_invoice_action):
    claimed = api.post("/api/v1/claims", claim_body()).json()
    report = {"token": claimed["token"], "outcome": "succeeded", "external_id": "in_1", "result": {}}

    response, statements = sent(api, f"/api/v1/claims/{claimed['key']}/outcome", report)

    assert response.json()["status"] == "recorded"
    assert response.json()["state"] == "succeeded"
    calls = [statement for statement in statements if "ledger_report_outcome(" in statement]
    assert len(calls) == 1
    assert calls[0].startswith("BEGIN; SELECT ledger_report_outcome(")
    assert statements[-1].startswith("SELECT ledger_audit_insert(")
    assert commits(statements) == 1
    # The call (checking the token), the event with the COMMIT: nothing compiled by the ORM.
    assert len(statements) == OUTCOME_STATEMENTS, statements


def test_a_succeeded_report_sent_again_is_one_call_and_one_commit_writing_nothing(api, send_invoice_action):
    claimed = api.post("/api/v1/claims", claim_body()).json()
    report = {"token": claimed["token"], "outcome": "succeeded", "external_id": "in_1", "result": {}}
    api.post(f"/api/v1/claims/{claimed['key']}/outcome", report)

    response, statements = sent(api, f"/api/v1/claims/{claimed['key']}/outcome", report)

    assert response.json()["status"] == "recorded"
    assert "already recorded" in response.json()["message"]
    assert sum("ledger_report_outcome(" in statement for statement in statements) == 1
    assert not any("ledger_audit_insert(" in statement for statement in statements)
    assert commits(statements) == 1
    assert len(statements) == OUTCOME_STATEMENTS, statements


def test_a_failed_report_still_takes_the_orms_way_in_one_commit(api, send_invoice_action):
    claimed = api.post("/api/v1/claims", claim_body()).json()
    report = {"token": claimed["token"], "outcome": "failed", "category": "transient", "error": "vendor said 503"}

    response, statements = sent(api, f"/api/v1/claims/{claimed['key']}/outcome", report)

    assert response.json()["state"] == "retrying"
    assert not any("ledger_report_outcome(" in statement for statement in statements)
    assert commits(statements) == 1
    assert len(statements) == FAILED_OUTCOME_STATEMENTS, statements


# A succeeded report: the call (with BEGIN, checking the token), the audit event (with the COMMIT).
OUTCOME_STATEMENTS = 2
# A failed or unknown report still takes the ORM's way (docs/performance.md): the token's check
# alone, then the ORM's reads, the move and its audit events in one transaction.
FAILED_OUTCOME_STATEMENTS = 12
