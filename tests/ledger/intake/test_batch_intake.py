"""A batch is written set-based: a fixed handful of statements and one commit whatever its size,
while every event is still answered on its own, in order, with in-batch repeats of a key answered
as the repeats they are."""

import pytest
from django.db import connection

from ledger.intake import submit as intake
from ledger.models import AuditEvent, Conflict, Delivery, Operation, Wakeup
from tests.conftest import event


def statements() -> int:
    """What a set of new events costs, plus the 2 of the transaction (a savepoint in a test): one
    call of ledger_reserve, then one INSERT of its audit events, sealed in this process (the audit
    key never reaches the database: ledger.core.audit_chain)."""
    return 2 + 2


def submit(workspace, events):
    return intake.submit_batch(workspace=workspace, raw_events=events, source="api", submitted_by="token:t")


@pytest.fixture
def woken(workspace):
    """An event was accepted before: a wake-up of the workers is pending."""
    submit(workspace, [event("warm-up", request_id="WARM-UP")])
    assert Wakeup.objects.count() == 1


def test_it_writes_a_batch_in_a_number_of_statements_that_does_not_grow_with_it(
    workspace, woken, django_assert_max_num_queries
):
    """The same statements for 2 events as for 40."""
    small = [event(f"s-{n}", request_id=f"S-{n}") for n in range(2)]
    large = [event(f"l-{n}", request_id=f"L-{n}") for n in range(40)]

    with django_assert_max_num_queries(statements()) as few:
        submit(workspace, small)
    with django_assert_max_num_queries(len(few.captured_queries)):
        results = submit(workspace, large)

    assert [r.outcome for r in results] == ["accepted"] * 40
    assert Operation.objects.count() == 43
    assert AuditEvent.objects.filter(kind="reserved").count() == 43
    assert Wakeup.objects.count() == 1  # still the one pending wake-up, not one per event


def test_it_writes_500_events_in_the_same_statements(workspace, woken, django_assert_max_num_queries):
    with django_assert_max_num_queries(statements()):
        results = submit(workspace, [event(f"l-{n}", request_id=f"L-{n}") for n in range(500)])
    assert {r.outcome for r in results} == {"accepted"}


def test_it_answers_each_event_in_order_with_in_batch_repeats_as_repeats(workspace):
    events = [
        event("d-1", request_id="R-1"),
        event("d-2", request_id="R-1"),  # the same event again
        event("d-3", request_id="R-1", title="Changed title"),  # the same key, another payload
        {"action": "prepare-brief", "data": {"request_id": "R-2"}},  # invalid
        event("d-5", request_id="R-3"),
    ]

    results = submit(workspace, events)

    assert [(r.outcome, r.http_status) for r in results] == [
        ("accepted", 201),
        ("duplicate", 200),
        ("conflict", 409),
        ("invalid", 422),
        ("accepted", 201),
    ]
    first = results[0].operation
    assert results[1].operation.pk == results[2].operation.pk == first.pk
    assert results[2].conflict.differences == [
        {"field": "title", "recorded": "Review renewal options", "incoming": "Changed title"}
    ]
    deliveries = list(Delivery.objects.order_by("id").values_list("sender_delivery_id", "outcome", "operation_id"))
    assert deliveries == [
        ("", "invalid", None),
        ("d-1", "accepted", first.pk),
        ("d-2", "duplicate", first.pk),
        ("d-3", "conflict", first.pk),
        ("d-5", "accepted", results[4].operation.pk),
    ]
    assert Conflict.objects.get().delivery.sender_delivery_id == "d-3"
    kinds = list(AuditEvent.objects.filter(operation=first).order_by("id").values_list("kind", "message"))
    d1, d2 = (Delivery.objects.get(sender_delivery_id=d).pk for d in ("d-1", "d-2"))
    assert kinds == [
        ("reserved", f"delivery {d1} via api"),
        ("duplicate_delivery", f"delivery {d2} via api"),
        ("conflict_detected", f"conflict {results[2].conflict.pk}: title differ"),
    ]


def test_it_answers_events_of_keys_reserved_before_the_batch(workspace):
    submit(workspace, [event("d-1", request_id="R-1")])

    results = submit(
        workspace,
        [event("d-2", request_id="R-1"), event("d-3", request_id="R-1", title="Other"), event("d-4", request_id="R-2")],
    )

    assert [r.outcome for r in results] == ["duplicate", "conflict", "accepted"]
    assert Operation.objects.count() == 2


def test_it_records_a_single_event_in_the_same_few_statements(workspace, woken, django_assert_max_num_queries):
    for n in range(3):
        with django_assert_max_num_queries(statements()):
            result = intake.submit_event(workspace=workspace, raw=event(f"d-{n}", request_id=f"R-{n}"), source="api")
        assert result.outcome == "accepted"


def test_it_records_a_duplicate_in_the_one_call_a_new_event_costs(workspace, woken):
    """A duplicate writes its delivery and audit event but reserves nothing and wakes no one, in the
    same statements a new event costs."""
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as new:
        intake.submit_event(workspace=workspace, raw=event("new", request_id="NEW"), source="api")
    with CaptureQueriesContext(connection) as duplicate:
        result = intake.submit_event(workspace=workspace, raw=event("again", request_id="WARM-UP"), source="api")

    assert result.outcome == "duplicate"
    assert len(duplicate.captured_queries) == len(new.captured_queries) == statements()
