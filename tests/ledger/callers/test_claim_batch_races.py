"""Claim batches racing single claims and each other, and two claims of one new event, on PostgreSQL,
with real connections and transactions (docs/claims.md, "POST /api/v1/claims/batch"): whoever
commits first, each key is claimed exactly once, every other claimer is told in progress, and the
audit chain still verifies."""

import threading

import pytest
from django.db import transaction

from ledger.callers import claiming
from ledger.core.audit_verify import verify_chains
from ledger.models import Attempt, Operation
from tests.ledger.callers.test_claims import INVOICE
from tests.ledger.people.test_conflict_hold_races import WAIT, in_thread, until, waiting_on_a_lock

pytestmark = pytest.mark.django_db(transaction=True)


def envelope(request_id: str) -> dict:
    return {"action": "send-invoice", "data": INVOICE | {"request_id": request_id}}


def race(*calls) -> list:
    """Run each call in a thread of its own connection, all released at once; their answers."""
    start, failures, answers = threading.Barrier(len(calls), timeout=WAIT), [], [None] * len(calls)

    def runner(index, call):
        def run():
            start.wait()
            answers[index] = call()

        return run

    threads = [in_thread(runner(index, call), failures) for index, call in enumerate(calls)]
    for thread in threads:
        thread.join()
    assert failures == []
    return answers


@pytest.mark.parametrize("round_", range(3))
def test_a_batch_and_single_claims_of_the_same_keys_claim_each_exactly_once(workspace, send_invoice_action, round_):
    keys = [f"INV-{round_}-{n}" for n in range(5)]

    def batch():
        return claiming.claim_each(workspace=workspace, raws=[envelope(key) for key in keys], submitted_by="batch")

    def single(key):
        return lambda: [claiming.claim(workspace=workspace, raw=envelope(key), submitted_by="single")]

    answers = race(batch, single(keys[0]), single(keys[4]), single(keys[2]))

    statuses = [answer.status for answered in answers for answer in answered]
    assert statuses.count("claimed") == len(keys)
    assert set(statuses) <= {"claimed", "in_progress"}
    assert Operation.objects.filter(state="processing", fencing_token=1).count() == len(keys)
    assert Attempt.objects.count() == len(keys)
    assert verify_chains().broken is None


def test_two_batches_of_the_same_keys_in_opposite_orders_both_finish_each_key_claimed_once(
    workspace, send_invoice_action
):
    """Their row locks are taken in opposite orders: a deadlock PostgreSQL breaks is run again."""
    keys = [f"INV-{n}" for n in range(8)]

    def batch(order, who):
        return lambda: claiming.claim_each(workspace=workspace, raws=[envelope(key) for key in order], submitted_by=who)

    answers = race(batch(keys, "one"), batch(keys[::-1], "two"))

    statuses = [answer.status for answered in answers for answer in answered]
    assert statuses.count("claimed") == len(keys)
    assert statuses.count("in_progress") == len(keys)
    assert Attempt.objects.count() == len(keys)
    assert verify_chains().broken is None


def test_a_claim_that_meets_the_same_new_event_created_claimed_by_another_is_told_in_progress(
    workspace, send_invoice_action
):
    """Neither found the operation, and both decided to create it claimed: the second one's insert
    waits for the first's commit, then the second decides on the row it finds, claimed by the
    first (in progress), and creates nothing."""
    claimed, commit, failures, answers = threading.Event(), threading.Event(), [], {}

    def first():
        with transaction.atomic():
            answers["first"] = claiming.claim(workspace=workspace, raw=envelope("INV-1"), submitted_by="first")
            claimed.set()
            assert commit.wait(WAIT)

    def second():
        answers["second"] = claiming.claim(workspace=workspace, raw=envelope("INV-1"), submitted_by="second")

    threads = [in_thread(first, failures)]
    assert claimed.wait(WAIT)
    threads.append(in_thread(second, failures))
    until(lambda: waiting_on_a_lock() == 1, "the second claim to wait for the first's insert")
    commit.set()
    for thread in threads:
        thread.join()

    assert failures == []
    assert (answers["first"].status, answers["second"].status) == ("claimed", "in_progress")
    operation = Operation.objects.get()
    assert (operation.state, operation.fencing_token, operation.lease_owner) == ("processing", 1, "first")
    assert Attempt.objects.count() == 1
    assert verify_chains().broken is None
