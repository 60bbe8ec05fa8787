"""Claim batches racing single claims and each other on PostgreSQL, with real connections and
transactions (docs/claims.md, "POST /api/v1/claims/batch"): whoever commits first, each key is
claimed exactly once, every other claimer is told in progress, and the audit chain still verifies."""

import threading

import pytest

from ledger.callers import claiming
from ledger.core.audit_verify import verify_chains
from ledger.models import Attempt, Operation
from tests.ledger.callers.test_claims import INVOICE
from tests.ledger.people.test_conflict_hold_races import WAIT, in_thread

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
