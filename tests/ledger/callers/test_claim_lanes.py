"""Callers' claims, claim batches and reports on a workspace of 4 audit lanes: each event on its
operation's lane (the claim's after its reservation's), every lane linked; two batches of the same
keys in opposite orders still both finish (a batch takes every lane, in order)."""

import pytest
from django.db import connection

from ledger.callers import claiming, reports
from ledger.core import accounts
from ledger.core.audit_verify import verify_chains
from ledger.models import AuditEvent
from tests.ledger.callers.test_claim_batch_races import envelope, race
from tests.ledger.callers.test_claims import claim_body


def lane_of(operation_id: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT ledger_audit_lane(%s, 4)", [operation_id])
        return cursor.fetchone()[0]


def lanes_of_operations(workspace) -> dict[int, set[int]]:
    lanes: dict[int, set[int]] = {}
    for operation_id, lane in AuditEvent.objects.filter(workspace=workspace, operation__isnull=False).values_list(
        "operation_id", "lane"
    ):
        lanes.setdefault(operation_id, set()).add(lane)
    return lanes


def assert_every_lane_linked(workspace) -> None:
    for lane in range(4):
        chain = list(AuditEvent.objects.filter(workspace=workspace, lane=lane).order_by("id"))
        assert [event.prev_hash for event in chain[1:]] == [event.hash for event in chain[:-1]], lane
    assert verify_chains().broken is None


def test_claims_a_batch_and_reports_put_each_event_on_its_operation_s_lane(workspace, api, send_invoice_action):
    accounts.set_audit_lanes(workspace, lanes=4, actor="test")
    singles = [api.post("/api/v1/claims", claim_body(request_id=f"INV-{n}")).json() for n in range(8)]
    batch = claiming.claim_each(
        workspace=workspace, raws=[envelope(f"INV-B{n}") for n in range(12)], submitted_by="batch"
    )
    for claimed in singles:
        answer = reports.report_outcome(
            workspace=workspace,
            key=claimed["key"],
            report=reports.OutcomeReport.model_validate({"token": claimed["token"], "outcome": "succeeded"}),
            actor="token:test",
        )
        assert answer.status == "recorded"

    assert [answer.status for answer in batch] == ["claimed"] * 12
    lanes = lanes_of_operations(workspace)
    assert len(lanes) == 20
    assert all(found == {lane_of(operation_id)} for operation_id, found in lanes.items())
    kinds = set(AuditEvent.objects.filter(workspace=workspace, lane__gt=0).values_list("kind", flat=True))
    assert {"reserved", "claimed", "succeeded"} <= kinds
    assert_every_lane_linked(workspace)


@pytest.mark.django_db(transaction=True)
def test_two_batches_of_the_same_keys_in_opposite_orders_on_four_lanes_both_finish(workspace, send_invoice_action):
    accounts.set_audit_lanes(workspace, lanes=4, actor="test")
    keys = [f"INV-{n}" for n in range(8)]

    def batch(order, who):
        return lambda: claiming.claim_each(workspace=workspace, raws=[envelope(key) for key in order], submitted_by=who)

    answers = race(batch(keys, "one"), batch(keys[::-1], "two"), batch(keys[2:6], "three"))

    statuses = [answer.status for answered in answers for answer in answered]
    assert statuses.count("claimed") == len(keys)
    assert len({lane for lanes in lanes_of_operations(workspace).values() for lane in lanes}) > 1
    assert_every_lane_linked(workspace)
