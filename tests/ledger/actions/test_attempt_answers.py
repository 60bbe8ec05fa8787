"""Every attempt keeps what the destination said: its status, a few headers, its
body up to 4 KiB, its own error code and words, with the action's sensitive values and the
destination's secret masked; and failure groups split by the destination's own code."""

import json

import httpx
import pytest

from ledger.actions import answers
from ledger.core.privacy import MASK
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import Attempt, Operation
from ledger.outcomes import Answer, PermanentError
from ledger.reads.failure_groups import failure_groups
from tests.conftest import external_event


def response(status: int, body, headers: dict | None = None) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    if not isinstance(body, bytes):
        headers = {"Content-Type": "application/json"} | (headers or {})
    return httpx.Response(
        status, content=content, headers=headers, request=httpx.Request("POST", "https://api.example/x")
    )


@pytest.mark.parametrize(
    ("body", "code", "said"),
    [
        (
            {"error": {"code": "card_declined", "message": "Your card was declined."}},
            "card_declined",
            "Your card was declined.",
        ),
        ({"code": "E1234", "message": "no such owner"}, "E1234", "no such owner"),
        ({"error": "invalid_grant", "error_description": "token expired"}, "invalid_grant", "token expired"),
        ({"title": "Bad Request", "detail": "amount must be positive"}, "", "amount must be positive"),
        ({"errors": [{"code": "missing_field", "message": "title is required"}]}, "missing_field", "title is required"),
        ({"error": "owner_unknown", "detail": "no owner ops-9"}, "owner_unknown", "no owner ops-9"),
        ({"code": "not a code"}, "", ""),  # a sentence is not a code
        ({"code": 4711}, "4711", ""),
        ({"error": True}, "", ""),
        ([1, 2], "", ""),
    ],
)
def test_the_code_and_words_are_read_from_the_common_shapes_of_json_bodies(body, code, said):
    answer = answers.answer_of(response(400, body))
    assert (answer.code, answer.said) == (code, said)


def test_a_plain_text_refusal_is_its_own_words_and_an_html_page_is_not():
    assert answers.answer_of(response(400, b"quota  exceeded\n")).said == "quota exceeded"
    html = response(502, b"<html><body>Bad gateway</body></html>", {"content-type": "text/html"})
    assert answers.answer_of(html).said == ""
    assert answers.answer_of(html).body == "<html><body>Bad gateway</body></html>"


def test_only_headers_that_help_a_person_are_kept():
    answer = answers.answer_of(
        response(
            429,
            {},
            {
                "Retry-After": "30",
                "X-Request-Id": "req_1",
                "Set-Cookie": "session=secret",
                "WWW-Authenticate": "Bearer",
            },
        )
    )
    assert answer.headers == {"content-type": "application/json", "retry-after": "30", "x-request-id": "req_1"}


def test_a_long_body_is_cut_at_the_bound_on_a_character_boundary_and_says_so():
    body = ("é" * 3000).encode()  # 6000 bytes; byte 4096 falls inside no character (2 bytes each)
    kept = answers.answer_of(response(500, body)).body
    assert kept.startswith("é" * 2048)
    assert kept.endswith("… [cut: 6,000 bytes in all, the first 4,096 kept]")
    assert len(kept.split("\n")[0].encode()) <= answers.BODY_LIMIT


def test_the_message_names_the_status_the_host_the_code_and_the_words():
    from ledger.actions.http import classify_response

    with pytest.raises(PermanentError) as refused:
        classify_response(response(400, {"error": {"code": "card_declined", "message": "Declined."}}))
    assert refused.value.message == "HTTP 400 from api.example [card_declined]: Declined."
    assert refused.value.http_status == 400
    assert refused.value.answer == Answer(
        status=400,
        headers={"content-type": "application/json"},
        body='{"error": {"code": "card_declined", "message": "Declined."}}',
        code="card_declined",
        said="Declined.",
    )


# Through the engine, against the real stand-in.


def submitted(workspace, action="send-notice", delivery_id="d-1", **data) -> Operation:
    result = submit_event(workspace=workspace, raw=external_event(action, delivery_id, **data), source="api")
    assert result.outcome == "accepted", result
    return result.operation


def test_a_refused_attempt_keeps_the_status_headers_body_and_code(workspace, standin):
    standin.fail_next(
        {"kind": "status", "status": 400, "error": "owner_unknown", "detail": "no owner named ops in this tenant"}
    )
    operation = submitted(workspace)
    process_due_operations(worker="w1")

    operation.refresh_from_db()
    attempt = Attempt.objects.get(operation=operation)
    assert (attempt.http_status, attempt.error_code) == (400, "owner_unknown")
    assert attempt.response_headers == {"content-type": "application/json"}
    assert json.loads(attempt.response_body) == {
        "error": "owner_unknown",
        "detail": "no owner named ops in this tenant",
    }
    assert attempt.error_message.endswith("[owner_unknown]: no owner named ops in this tenant")
    assert operation.last_error_message == attempt.error_message


def test_retry_after_is_kept_with_a_refusal_that_will_be_retried(workspace, standin):
    standin.fail_next({"kind": "status", "status": 503, "retry_after": 40, "error": "busy"})
    submitted(workspace)
    process_due_operations(worker="w1")

    attempt = Attempt.objects.get()
    assert attempt.outcome == "transient"
    assert attempt.response_headers["retry-after"] == "40"
    assert attempt.error_code == "busy"


def test_the_actions_sensitive_values_are_masked_before_anything_is_stored(workspace, standin):
    """send-welcome's email is sensitive: the stand-in's refusal quotes it, nothing stores it."""
    standin.fail_next(
        {"kind": "status", "status": 422, "error": "bounced", "detail": "mailbox Ann.Lee@Example.org is full"}
    )
    result = submit_event(
        workspace=workspace,
        raw={
            "action": "send-welcome",
            "delivery_id": "w-1",
            "data": {"email": "ann.lee@example.org", "version": 1, "language": "en"},
        },
        source="api",
    )
    process_due_operations(worker="w1")

    operation = Operation.objects.get(pk=result.operation.pk)
    attempt = Attempt.objects.get(operation=operation)
    for stored in (attempt.response_body, attempt.error_message, operation.last_error_message):
        assert "ann.lee" not in stored.lower()
        assert MASK in stored
    assert attempt.error_code == "bounced"


def test_a_failure_group_splits_by_the_destinations_own_error_code(workspace, standin):
    """45 rejections for different reasons are not one group: the stand-in's own codes split them,
    and the same code in other words stays one group."""
    refusals = [("owner_unknown", "no owner ops-1"), ("owner_unknown", "no owner ops-22"), ("owner_unknown", "gone")]
    refusals += [("summary_too_long", "summary over 80 characters")] * 2 + [("archived", "request archived")]
    standin.fail_next(*[{"kind": "status", "status": 400, "error": code, "detail": said} for code, said in refusals])
    for n in range(len(refusals)):
        submitted(workspace, delivery_id=f"d-{n}", request_id=f"R-{n}")
        process_due_operations(worker="w1", limit=1)  # one at a time: the faults are taken in order

    groups, _ = failure_groups(Operation.objects.all())

    assert [(g.criterion.general, g.count) for g in groups] == [
        ("HTTP 400 from <ip> [owner_unknown]: <said>", 3),
        ("HTTP 400 from <ip> [summary_too_long]: <said>", 2),
        ("HTTP 400 from <ip> [archived]: <said>", 1),
    ]
    for group in groups:
        assert Operation.objects.filter(group.criterion.filter()).count() == group.count


def test_a_lookup_that_quotes_a_sensitive_value_is_masked_in_the_last_error_and_the_audit(
    workspace, standin, time_machine
):
    from datetime import timedelta

    from django.utils import timezone

    from ledger.models import AuditEvent
    from reconciliation.reconcile import reconcile_operation

    standin.fail_next({"kind": "drop_after_commit"})
    welcome = {"email": "ann.lee@example.org", "version": 1, "language": "en"}
    result = submit_event(
        workspace=workspace, raw={"action": "send-welcome", "delivery_id": "w-1", "data": welcome}, source="api"
    )
    process_due_operations(worker="w1")
    operation = Operation.objects.get(pk=result.operation.pk)
    assert operation.state == "unknown"
    standin.fail_next_lookup({"kind": "status", "status": 503, "error": "busy", "detail": "ann.lee@example.org: later"})
    time_machine.move_to(timezone.now() + timedelta(minutes=1))  # past the time a request may still land

    assert reconcile_operation(operation) == "cannot_tell"

    operation.refresh_from_db()
    said = AuditEvent.objects.get(operation=operation, kind="lookup_failed").message
    for stored in (operation.last_error_message, said):
        assert "[busy]" in stored
        assert MASK in stored
        assert "ann.lee" not in stored
