"""External actions against a real HTTP destination (the stand-in): each answer is classified
the way docs/design.md rule 6 says, and a destination that honours idempotency keys never acts twice."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.actions import get_action
from ledger.actions.http import retry_after_seconds
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import Attempt, Operation
from tests.conftest import external_event


def submitted(workspace, action="send-notice", **data) -> Operation:
    result = submit_event(workspace=workspace, raw=external_event(action, **data), source="api")
    assert result.outcome == "accepted", result
    return result.operation


def processed(operation) -> Operation:
    process_due_operations(worker="w1")
    operation.refresh_from_db()
    return operation


def make_due(operation) -> None:
    Operation.objects.filter(pk=operation.pk).update(next_attempt_at=timezone.now())


@pytest.mark.parametrize(("action", "key_sent"), [("file-ticket", True), ("send-notice", False)])
def test_it_creates_one_record_carrying_the_operation_key(workspace, standin, action, key_sent):
    operation = processed(submitted(workspace, action))

    [record] = standin.records()
    assert operation.state == "succeeded"
    assert operation.external_id == record["id"]
    assert operation.result == {"record_id": record["id"]}
    assert record["reference"] == operation.key
    assert record["payload"] == {"summary": "Renewal notice", "owner": "ops"}
    assert record["idempotency_key"] == (operation.key if key_sent else None)
    assert Attempt.objects.get().idempotency_key == (operation.key if key_sent else "")


def test_it_retries_a_refusal_no_earlier_than_retry_after(workspace, standin):
    standin.fail_next({"kind": "status", "status": 503, "retry_after": 40})
    operation = processed(submitted(workspace))

    attempt = Attempt.objects.get()
    assert (operation.state, attempt.outcome, attempt.http_status) == ("retrying", "transient", 503)
    assert operation.next_attempt_at >= attempt.started_at + timedelta(seconds=40)
    assert standin.records() == []


@pytest.mark.parametrize("status", [400, 404, 409, 422])
def test_it_sends_a_rejected_request_to_review(workspace, standin, status):
    standin.fail_next({"kind": "status", "status": status})
    operation = processed(submitted(workspace))

    assert (operation.state, operation.last_error["category"]) == ("needs_review", "permanent")
    assert Attempt.objects.get().http_status == status


@pytest.mark.parametrize(
    "fault",
    [
        {"kind": "status", "status": 500},
        {"kind": "status", "status": 504},
        {"kind": "reset_before"},
        {"kind": "drop_after_commit"},
    ],
    ids=["500", "504", "reset", "dropped-answer"],
)
def test_it_marks_an_answer_that_may_hide_an_effect_unknown(workspace, standin, fault):
    """Without idempotency keys nothing is sent again until reconciliation has asked."""
    standin.fail_next(fault)
    operation = processed(submitted(workspace, "send-notice"))

    assert (operation.state, operation.last_error["category"]) == ("unknown", "ambiguous")
    # The first lookup waits until the request can no longer land at the destination.
    settle = get_action("send-notice").settle_after
    assert operation.next_attempt_at >= Attempt.objects.get().started_at + settle
    assert process_due_operations() == 0


def test_it_retries_an_ambiguous_try_with_the_same_key_and_the_destination_acts_once(workspace, standin):
    standin.fail_next({"kind": "drop_after_commit"})
    operation = processed(submitted(workspace, "file-ticket"))
    assert operation.state == "retrying"
    [record] = standin.records()

    make_due(operation)
    operation = processed(operation)

    assert operation.state == "succeeded"
    assert operation.external_id == record["id"]
    assert standin.records() == [record]
    assert standin.requests() == 2
    assert list(Attempt.objects.values_list("idempotency_key", flat=True)) == [operation.key, operation.key]


def test_it_retries_when_the_destination_cannot_be_reached(workspace, settings):
    settings.OPSCONSOLE_STANDIN_URL = "http://127.0.0.1:9"  # discard port: nothing listens
    operation = processed(submitted(workspace))

    assert (operation.state, operation.last_error["category"]) == ("retrying", "transient")
    assert "did not reach" in operation.last_error["message"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [("7", 7.0), (None, None), ("", None), ("soon", None), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0)],
)
def test_it_reads_retry_after_as_seconds_or_a_date(value, expected):
    assert retry_after_seconds(value) == expected


def test_it_reads_a_future_retry_after_date(time_machine):
    time_machine.move_to("2030-01-07 09:00:00+00:00", tick=False)
    assert retry_after_seconds("Mon, 07 Jan 2030 09:01:30 GMT") == 90.0
