"""A request of one event is reserved by its own function (``ledger_reserve_one``, migration
0024), a batch set-based (``ledger_reserve``): the same events, sent one at a time or as one batch,
leave the same rows, answers and audit trail."""

import re

from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger.core import accounts, audit_verify
from ledger.intake import submit
from ledger.models import AuditEvent, Conflict, Contribution, Delivery, Operation
from tests.conftest import event

# New, the same again, another payload for its key, and a second new one with transport metadata.
EVENTS = [
    event("d-1", request_id="R-1"),
    event("d-2", request_id="R-1"),
    event("d-3", request_id="R-1", title="Changed title", owner="finance"),
    {**event("d-4", request_id="R-2"), "correlation_id": "corr-9", "occurred_at": "2026-11-30T08:00:00+01:00"},
]
ID = re.compile(r"\d+")


def unscoped(key: str) -> str:
    """A key without its workspace's slug (keys are scoped to their workspace)."""
    return key.split(":", 1)[1]


def rows(workspace):
    """What intake wrote for ``workspace``, without what differs by construction (ids, times,
    the workspace itself): foreign keys by the key or sender's id they stand for."""
    operations = list(Operation.objects.filter(workspace=workspace).order_by("id").values())
    keys = {row["id"]: unscoped(row["key"]) for row in operations}
    deliveries = list(Delivery.objects.filter(workspace=workspace).order_by("id").values())
    sender_ids = {row["id"]: row["sender_delivery_id"] for row in deliveries}
    for row in operations + deliveries:
        row["key"] = unscoped(row["key"])
    for row in operations:
        row["deadline_after"] = round((row["deadline"] - row["created_at"]).total_seconds())
    for row in deliveries:
        row["operation_id"] = keys[row["operation_id"]]
    conflicts = list(Conflict.objects.filter(operation__workspace=workspace).order_by("id").values())
    for row in conflicts:
        row["operation_id"], row["delivery_id"] = keys[row["operation_id"]], sender_ids[row["delivery_id"]]
    contributions = [
        (keys[operation], user, kind)
        for operation, user, kind in Contribution.objects.filter(operation__workspace=workspace)
        .order_by("id")
        .values_list("operation_id", "user_id", "kind")
    ]
    events = list(
        AuditEvent.objects.filter(workspace=workspace, operation__isnull=False)
        .order_by("id")
        .values("operation_id", "attempt_id", "actor", "kind", "from_state", "to_state", "error_category", "message")
    )
    for row in events:
        row["operation_id"], row["message"] = keys[row["operation_id"]], ID.sub("N", row["message"])
    drop = {"id", "workspace_id", "created_at", "updated_at", "received_at", "deadline"}
    return {
        "operations": [{k: v for k, v in row.items() if k not in drop} for row in operations],
        "deliveries": [{k: v for k, v in row.items() if k not in drop} for row in deliveries],
        "conflicts": [{k: v for k, v in row.items() if k not in drop} for row in conflicts],
        "contributions": contributions,
        "audit": events,
    }


def answers(results):
    return [
        (
            r.outcome,
            r.http_status,
            unscoped(r.key),
            unscoped(r.operation.key),
            r.operation.state,
            r.conflict.differences if r.conflict else None,
        )
        for r in results
    ]


def test_one_event_at_a_time_leaves_what_one_batch_of_them_leaves(db, person):
    alone, _ = accounts.create_workspace(slug="alone", approved_owners=["ops", "finance"], actor="test")
    batched, _ = accounts.create_workspace(slug="batched", approved_owners=["ops", "finance"], actor="test")
    submitter = person("sam", "operator", workspaces=("alone", "batched"))
    sender = {"source": "api", "submitted_by": "user:sam", "person": submitter}

    one_at_a_time = [submit.submit_event(workspace=alone, raw=body, **sender) for body in EVENTS]
    as_a_batch = submit.submit_batch(workspace=batched, raw_events=EVENTS, **sender)

    assert [r.outcome for r in one_at_a_time] == ["accepted", "duplicate", "conflict", "accepted"]
    assert answers(one_at_a_time) == answers(as_a_batch)
    written = rows(alone)
    for table, found in rows(batched).items():
        assert written[table] == found, table
    assert [row["kind"] for row in written["audit"]] == [
        "reserved",
        "duplicate_delivery",
        "conflict_detected",
        "reserved",
    ]
    assert written["conflicts"][0]["differences"] == [
        {"field": "title", "recorded": "Review renewal options", "incoming": "Changed title"},
        {"field": "owner", "recorded": "ops", "incoming": "finance"},
    ]
    assert len(written["contributions"]) == 2  # the person behind each new operation
    assert audit_verify.verify_chains().broken is None


def test_a_single_event_is_one_call_of_its_own_function(workspace):
    with CaptureQueriesContext(connection) as single:
        submit.submit_event(workspace=workspace, raw=event("d-1", request_id="ONE"), source="api")
    with CaptureQueriesContext(connection) as batch:
        submit.submit_batch(workspace=workspace, raw_events=[event("d-2", request_id="TWO")] * 2, source="api")

    calls = [q["sql"] for q in single.captured_queries + batch.captured_queries if "ledger_reserve" in q["sql"]]
    assert [sql.split("(")[0] for sql in calls] == ["SELECT ledger_reserve_one", "SELECT ledger_reserve"]
