"""A ``succeeded`` report in one database call (``ledger_report_outcome``, docs/claims.md): fenced by
the claim's token as the ORM's way fences it, answered as it answers, counted and audited as it
counts and audits; through the real route, and racing a second report and the sweep on real
connections."""

from datetime import timedelta

import pytest

from ledger.callers import reports
from ledger.core import tallies
from ledger.core.audit_verify import verify_chains
from ledger.models import Attempt, AuditEvent, Operation
from ledger.sweep import sweep
from tests.ledger.callers import test_claims
from tests.ledger.callers.test_claim_batch_races import race
from tests.ledger.callers.test_claims import claim_body, expire_lease, writes
from tests.ledger.conftest import START, submit_brief

claims = test_claims.claims  # the fixture: the claims routes, as a caller sends them


def succeeded(claimed: dict, **fields) -> dict:
    return {"token": claimed["token"], "outcome": "succeeded", **fields}


def test_a_succeeded_report_writes_what_the_orms_way_writes(claims):
    claimed = claims.claimed()

    recorded = claims.outcome(claimed["key"], succeeded(claimed, external_id="inv_1", result={"number": "F-9"}))

    assert (recorded.status_code, recorded.json()["status"]) == (200, "recorded")
    assert recorded.json()["message"] == "recorded: the operation is succeeded"
    operation = Operation.objects.get()
    assert (operation.state, operation.result, operation.external_id) == ("succeeded", {"number": "F-9"}, "inv_1")
    assert (operation.lease_owner, operation.lease_expires_at, operation.fencing_token) == ("", None, 1)
    attempt = Attempt.objects.get()
    assert (attempt.outcome, attempt.external_id, attempt.finished_at) == ("ok", "inv_1", operation.updated_at)
    [event] = AuditEvent.objects.filter(kind="succeeded")
    assert (event.operation_id, event.attempt_id, event.from_state, event.to_state) == (
        operation.pk,
        attempt.pk,
        "processing",
        "succeeded",
    )
    assert event.actor == attempt.worker
    assert verify_chains().broken is None


def test_the_same_success_again_is_answered_as_recorded_and_another_under_the_claim_is_a_conflict(claims):
    claimed = claims.claimed()
    claims.outcome(claimed["key"], succeeded(claimed, external_id="inv_1"))
    before = writes()

    again = claims.outcome(claimed["key"], succeeded(claimed, external_id="inv_1"))
    other = claims.outcome(claimed["key"], succeeded(claimed, external_id="inv_2"))
    failed = claims.outcome(claimed["key"], {"token": claimed["token"], "outcome": "failed", "category": "permanent"})

    assert (again.status_code, again.json()["message"]) == (200, "already recorded: the operation is succeeded")
    for refused in (other, failed):
        assert (refused.status_code, refused.json()["status"]) == (409, "outcome_conflict")
        assert refused.json()["message"] == "claim 1 already reported a different outcome (ok): nothing changed"
    assert writes() == before
    assert Operation.objects.get().external_id == "inv_1"


def test_a_success_reported_after_the_lease_expired_is_stale_and_moves_the_operation_to_unknown(claims):
    """The report is the first to see the lease over: it moves the operation as the sweep would."""
    claimed = claims.claimed(lease_seconds=5)
    expire_lease(claimed["key"])

    late = claims.outcome(claimed["key"], succeeded(claimed, external_id="inv_1"))

    assert (late.status_code, late.json()["status"], late.json()["state"]) == (409, "stale_token", "unknown")
    assert late.json()["message"].startswith("the lease expired before an outcome was reported")
    operation = Operation.objects.get()
    assert (operation.state, operation.external_id) == ("unknown", "")
    assert operation.attempt_rows.get().outcome == "abandoned"
    assert operation.audit_events.filter(kind="lease_expired").count() == 1
    assert not AuditEvent.objects.filter(kind="succeeded").exists()


def test_a_success_for_a_key_of_no_operation_or_an_unstorable_key_is_not_found(claims):
    claimed = claims.claimed()
    before = writes()

    for key in ("demo:INV-404:v1:send-invoice", "demo:INV-7\x00:v1:send-invoice"):
        missing = claims.outcome(key, succeeded(claimed))
        assert missing.status_code == 404, missing.json()
    assert writes() == before


def test_a_report_under_a_workers_actions_key_takes_the_orms_way_and_is_stale(claims, workspace):
    """A key whose last part names no action its caller performs is not the call's to decide."""
    claimed = claims.claimed()
    brief = submit_brief(workspace)
    before = writes()

    stale = claims.outcome(brief.key, succeeded(claimed))

    assert (stale.status_code, stale.json()["status"]) == (409, "stale_token")
    assert writes() == before


def test_a_succeeded_report_is_counted_as_the_orms_way_counts_it(api, claims, workspace, time_machine):
    """The call's tallies (the try, the finished operation, its bucket, its lateness) against those of
    the same report recorded the ORM's way, each a moment after its own claim."""
    counted = []
    for request_id, in_one_call in (("INV-1", True), ("INV-2", False), ("INV-3", True), ("INV-4", False)):
        late = request_id in ("INV-3", "INV-4")
        time_machine.move_to(START, tick=False)
        claimed = claims.claimed(request_id=request_id, lease_seconds=3600)
        time_machine.move_to(START + timedelta(minutes=31 if late else 4), tick=False)
        before = tallies.totals()
        body = succeeded(claimed, external_id="inv")
        if in_one_call:
            assert claims.outcome(claimed["key"], body).json()["status"] == "recorded"
        else:
            report = reports.OutcomeReport.model_validate(body)
            answer = reports._reported(workspace=workspace, key=claimed["key"], report=report, actor="token:test")
            assert answer.status == "recorded"
        after = tallies.totals()
        counted.append({name: after[name] - before.get(name, 0) for name in after if after[name] != before.get(name)})

    assert counted[0] == counted[1]
    assert counted[2] == counted[3]
    assert (tallies.LATE, '{"action": "send-invoice"}') in counted[2]
    assert (tallies.LATE, '{"action": "send-invoice"}') not in counted[0]
    assert verify_chains().broken is None


pytestmark_races = pytest.mark.django_db(transaction=True)


@pytestmark_races
@pytest.mark.parametrize("round_", range(3))
def test_a_success_and_a_failure_racing_under_one_claim_record_exactly_one(workspace, send_invoice_action, api, round_):
    claimed = api.post("/api/v1/claims", claim_body(request_id=f"INV-{round_}")).json()
    key = claimed["key"]

    def report(body):
        return lambda: reports.report_outcome(
            workspace=workspace, key=key, report=reports.OutcomeReport.model_validate(body), actor="token:race"
        )

    answers = race(
        report(succeeded(claimed, external_id="inv_1")),
        report({"token": claimed["token"], "outcome": "failed", "category": "permanent", "error": "HTTP 400"}),
    )

    assert sorted(answer.status for answer in answers) == ["outcome_conflict", "recorded"]
    operation = Operation.objects.get(key=key)
    assert operation.state in ("succeeded", "needs_review")
    assert Attempt.objects.get(operation=operation).outcome == ("ok" if operation.state == "succeeded" else "permanent")
    assert AuditEvent.objects.filter(operation=operation, from_state="processing").count() == 1
    assert verify_chains().broken is None


@pytestmark_races
@pytest.mark.parametrize("round_", range(3))
def test_a_success_racing_the_sweep_over_an_expired_lease_is_stale_and_the_operation_unknown_once(
    workspace, send_invoice_action, api, round_
):
    claimed = api.post("/api/v1/claims", claim_body(request_id=f"INV-{round_}", lease_seconds=5)).json()
    expire_lease(claimed["key"])
    body = reports.OutcomeReport.model_validate(succeeded(claimed, external_id="inv_1"))

    answers = race(
        lambda: reports.report_outcome(workspace=workspace, key=claimed["key"], report=body, actor="token:late"),
        sweep,
    )

    assert answers[0].status == "stale_token"
    operation = Operation.objects.get(key=claimed["key"])
    assert (operation.state, operation.external_id) == ("unknown", "")
    assert operation.audit_events.filter(kind="lease_expired").count() == 1
    assert verify_chains().broken is None


def test_the_claims_attempt_is_locked_alone_before_its_operation(workspace, send_invoice_action, api):
    """Lock order (docs/architecture.md): the claim's Attempt, then the row. Locking the attempt
    through a join with its operation (the model's ordering) locked the operation's row too, in the
    plan's order, and deadlocked a failure report against a success's single call."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    claimed = api.post("/api/v1/claims", claim_body(request_id="INV-lock")).json()
    operation = Operation.objects.get(key=claimed["key"])

    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        attempt = reports._attempt_of(operation, claimed["token"])

    assert attempt is not None
    assert attempt.operation_id == operation.pk
    [locking] = [query["sql"] for query in queries.captured_queries if "FOR UPDATE" in query["sql"]]
    assert 'FOR UPDATE OF "ledger_attempt"' in locking
    assert "JOIN" not in locking
