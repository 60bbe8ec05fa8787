"""No sensitive value reaches a log line. Every test of the suite runs under the log guard
(tests/conftest.py, tests/logguard.py); these show that the guard fails a test that logs one, and
run the refund's noisiest paths (retries, a lost answer, a conflict, a failing batch) under it."""

import json
import logging

import pytest
from django.core.management import call_command

from ledger.core import accounts
from ledger.engine.processing import process_due_operations
from ledger.intake import reservation
from ledger.models import Conflict, Operation
from ledger.people.approvals import approve_operation
from tests.logguard import LogGuard

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def planted(guard: LogGuard, *values) -> LogGuard:
    guard.values.extend(values)
    guard.start()
    return guard


@pytest.fixture
def guard():
    """A second guard of this test's own, for planted records (the suite's guard then sees them
    too: each test below clears the lines it planted)."""
    guard = LogGuard()
    yield guard
    guard.stop()


def test_the_guard_fails_a_test_that_logged_a_sensitive_value(guard, log_guard):
    planted(guard, "C-1001")
    logging.getLogger("ledger").info("refund for %s", "C-1001")

    with pytest.raises(pytest.fail.Exception, match="1 log records show a sensitive value"):
        guard.check()
    [(value, line)] = guard.leaks()
    assert value == "C-1001"
    assert "refund for C-1001" in line
    log_guard.lines.clear()


@pytest.mark.parametrize(
    "log",
    [
        pytest.param(lambda: logging.getLogger("ledger").info("transition", extra={"customer": "C-1001"}), id="extra"),
        pytest.param(lambda: logging.getLogger("ledger.deep.child").debug("C-1001"), id="debug-level"),
        pytest.param(lambda: logging.getLogger("django.request").warning("C-1001"), id="non-propagating"),
        pytest.param(lambda: logging.getLogger("httpx").info("GET /records?customer=C-1001"), id="a-library"),
    ],
)
def test_the_guard_reads_every_part_of_every_record(guard, log_guard, log):
    planted(guard, "C-1001")
    log()
    assert [value for value, _ in guard.leaks()] == ["C-1001"]
    log_guard.lines.clear()


def test_the_guard_reads_an_exception_message_the_json_log_withholds(guard, log_guard):
    planted(guard, "C-1001")
    try:
        raise ValueError("no customer C-1001")
    except ValueError:
        logging.getLogger("ledger").exception("unexpected error performing demo:R-7:v1:issue-refund")

    [(_, line)] = guard.leaks()
    assert "ValueError: no customer C-1001" in line
    log_guard.lines.clear()


def test_the_guard_finds_a_value_as_a_key_or_json_writes_it(guard, log_guard):
    planted(guard, "ann@example.com", "Zoë-7")
    logger = logging.getLogger("ledger")
    logger.info("key demo:ann%40example.com:v1:send-welcome")
    logger.info(json.dumps({"name": "Zoë-7"}))

    assert sorted(value for value, _ in guard.leaks()) == ["Zoë-7", "ann@example.com"]
    log_guard.lines.clear()


def test_the_guard_finds_a_number_as_a_number_only(guard, log_guard):
    planted(guard, 4500, 42, True)
    logger = logging.getLogger("ledger")
    logger.info("stand-in at 127.0.0.1:45001, 14500 records, 42 workers")
    logger.info("Pushed ('oscar-jig-alanine-bacon', 'a01db0a5d80745f096dcb4500b91f')")  # django-q2's task id
    assert guard.leaks() == []

    logger.info("refund of 4500 cents")
    assert [value for value, _ in guard.leaks()] == [4500]
    log_guard.lines.clear()


def test_a_status_the_server_answered_is_no_amount_anyone_sent(guard, log_guard):
    """An amount of 200 cents and the status 200 of an access line are the same digits; the
    server's own figures (status, status_code, duration_ms) are not read, anything else still is."""
    planted(guard, 200)
    logging.getLogger("opsconsole.access").info("GET /console/", extra={"status": 200, "duration_ms": 200.0})
    logging.getLogger("django.request").warning("Not Found: /x", extra={"status_code": 200})
    assert guard.leaks() == []

    logging.getLogger("opsconsole.access").info("GET /console/", extra={"status": "200", "amount": 200})
    assert [value for value, _ in guard.leaks()] == [200]
    log_guard.lines.clear()


def test_a_raised_bar_leaves_short_words_out_and_still_finds_long_values(guard, log_guard):
    """The fuzzer's bar (tests/api): "view" in a request path is chance, "customer-12345" a leak."""
    planted(guard, "view", "customer-12345")
    guard.min_text = 8
    logging.getLogger("django.request").warning("Not Found: /api/v1/review for customer-12345")

    assert [value for value, _ in guard.leaks()] == ["customer-12345"]
    log_guard.lines.clear()


def test_the_guard_collects_what_passes_intake(log_guard, workspace):
    accounts.issue_token(workspace=workspace, name="x", actor="test")
    from ledger.intake.submit import submit_event

    submit_event(workspace=workspace, raw={"action": "issue-refund", "data": REFUND}, source="api")

    assert log_guard.values == ["C-1001", 4500]


# --- the refund's paths, under the suite's guard --------------------------------------------------


@pytest.fixture
def admin(person):
    return person("boss", "admin")


def test_a_refund_through_retries_a_lost_answer_and_a_conflict_logs_no_value(
    client, workspace, approver, admin, standin, log_guard, caplog
):
    token = accounts.issue_token(workspace=workspace, name="shop", actor="test")
    sent = client.post(
        "/api/v1/events",
        json.dumps({"action": "issue-refund", "data": REFUND}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert sent.status_code == 201
    raised = client.post(
        "/api/v1/events",
        json.dumps({"action": "issue-refund", "data": REFUND | {"amount_cents": 450_000, "customer_id": "C-2002"}}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert raised.status_code == 409
    call_command("conflict", "dismiss", str(Conflict.objects.get().pk), "--as", "boss", "--reason", "typo")
    operation = Operation.objects.get()
    approve_operation(operation, user=approver, fingerprint=operation.fingerprint)

    standin.fail_next({"kind": "status", "status": 503}, {"kind": "drop_after_commit"})
    for _ in range(3):
        Operation.objects.filter(pk=operation.pk).update(next_attempt_at=None)
        process_due_operations(worker="w1")
    operation.refresh_from_db()

    assert operation.state == "succeeded"
    assert standin.records()[0]["payload"]["customer_id"] == "C-1001"
    assert sorted(log_guard.values, key=str) == sorted(["C-1001", 4500, "C-2002", 450_000], key=str)
    transitions = [line for line in log_guard.lines if operation.key in line]
    assert len(transitions) >= 4, log_guard.lines  # what was logged, the guard read


def test_a_failing_batch_of_refunds_logs_no_value(api, monkeypatch, log_guard):
    """The batch that cannot be written at once is logged with its traceback, then each event alone."""
    reserve = reservation.reserve
    calls = []

    def fail_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the set could not be written")
        return reserve(*args, **kwargs)

    monkeypatch.setattr(reservation, "reserve", fail_once)
    events = [
        {"action": "issue-refund", "data": REFUND | {"request_id": f"R-{n}", "customer_id": f"C-90{n}"}}
        for n in range(3)
    ]

    response = api.post("/api/v1/events/batch", {"events": events})

    assert [r["http_status"] for r in response.json()["results"]] == [201, 201, 201]
    assert any("writing its events one at a time" in line for line in log_guard.lines)
    assert {"C-900", "C-901", "C-902"} <= set(log_guard.values)
