"""Failures are visible and retryable: every request carries an id that its log lines repeat, an
unhandled error reaches the JSON log with its traceback but never the submitted text, and a
database that cannot be reached gives a retryable 503 (JSON for automations, a page for people)."""

import json
import logging

import pytest
from django.conf import settings
from django.db import connection

from tests.opsconsole.conftest import json_log

pytestmark = pytest.mark.django_db


@pytest.fixture
def request_log():
    """What django.request writes, through the project's JSON formatter."""
    with json_log("django.request") as stream:
        yield stream


def test_it_sends_django_request_to_the_json_log():
    assert "console" in settings.LOGGING["loggers"]["django.request"]["handlers"]
    assert settings.LOGGING["handlers"]["console"]["formatter"] == "json"


def test_it_gives_every_answer_a_request_id(client):
    generated = client.get("/accounts/login/")
    echoed = client.get("/accounts/login/", HTTP_X_REQUEST_ID="lb-7f3a.9")
    refused = client.get("/accounts/login/", HTTP_X_REQUEST_ID="<script>")

    assert len(generated["X-Request-ID"]) == 32
    assert echoed["X-Request-ID"] == "lb-7f3a.9"
    assert refused["X-Request-ID"] != "<script>"
    assert len(refused["X-Request-ID"]) == 32


def test_it_logs_an_unhandled_error_with_its_request_id_and_without_its_message(
    client, person, monkeypatch, request_log
):
    client.force_login(person("viewer", "viewer"))

    customer = "C-" + "1001"

    def broken(*args, **kwargs):
        raise RuntimeError(f"customer {customer} refund")  # as if an error quoted a payload

    monkeypatch.setattr("opsconsole.console.views.oldest_due_seconds", broken)
    client.raise_request_exception = False

    response = client.get("/console/", HTTP_X_REQUEST_ID="req-42")

    assert response.status_code == 500
    assert "Something went wrong on our side" in response.content.decode()
    [line] = [json.loads(line) for line in request_log.getvalue().splitlines()]
    assert (line["level"], line["logger"], line["request_id"], line["status_code"]) == (
        "ERROR",
        "django.request",
        "req-42",
        500,
    )
    assert "in broken" in line["exception"]
    assert "builtins.RuntimeError (message withheld)" in line["exception"]
    assert "C-1001" not in request_log.getvalue()


def test_it_logs_a_failed_request_without_its_query_string(client, person, monkeypatch, request_log):
    """A search for a customer is a sensitive value in the query string: the log line names only
    the method and the path of the request django.request passes."""
    client.force_login(person("viewer", "viewer"))

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("opsconsole.console.views.oldest_due_seconds", broken)
    client.raise_request_exception = False

    response = client.get("/console/", {"q": "C-" + "1001"})

    assert response.status_code == 500
    [line] = [json.loads(line) for line in request_log.getvalue().splitlines()]
    assert line["request"] == "GET /console/"
    assert "C-1001" not in request_log.getvalue()


@pytest.fixture
def database_down(settings):
    """Call it to make the database stop answering: the next connection attempt is refused
    (nothing listens on port 9)."""
    original = dict(connection.settings_dict)

    def take_down():
        connection.close()
        connection.settings_dict["PORT"] = "9"

    yield take_down
    connection.close()
    connection.settings_dict.clear()
    connection.settings_dict.update(original)


@pytest.mark.django_db(transaction=True)
def test_it_answers_an_automation_503_with_retry_after_when_the_database_is_down(client, token, database_down):
    client.raise_request_exception = False
    database_down()

    response = client.post(
        "/api/v1/events",
        {"action": "prepare-brief", "data": {}},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )

    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json()["status"] == "unavailable"
    assert "resending is safe" in response.json()["detail"]


@pytest.mark.django_db(transaction=True)
def test_it_logs_the_503_with_its_request_id(client, token, database_down, request_log):
    client.raise_request_exception = False
    database_down()

    client.post(
        "/api/v1/events",
        {},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        HTTP_X_REQUEST_ID="req-down",
    )

    [line] = [json.loads(line) for line in request_log.getvalue().splitlines()]
    assert (line["status_code"], line["request_id"]) == (503, "req-down")


@pytest.mark.django_db(transaction=True)
def test_it_shows_a_person_a_friendly_page_when_the_database_is_down(client, person, database_down):
    client.force_login(person("viewer", "viewer"))
    client.raise_request_exception = False
    database_down()

    response = client.get("/console/", HTTP_X_REQUEST_ID="req-503")

    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    page = response.content.decode()
    assert "cannot reach its database right now" in page
    assert "req-503" in page


@pytest.fixture
def template_log():
    """Every record django.template writes, at DEBUG (its missing-variable line is DEBUG)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("django.template")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_the_500_page_is_drawn_without_logging_the_failure_it_answers(client, person, monkeypatch, template_log):
    """The page is rendered while the failure is handled: a variable its layout looked up in vain
    would be logged with the failure chained to it, its message (a payload value) and all."""
    client.force_login(person("viewer", "viewer"))

    def broken(*args, **kwargs):
        raise RuntimeError("customer C-" + "2002 refund")

    monkeypatch.setattr("opsconsole.console.views.oldest_due_seconds", broken)
    client.raise_request_exception = False

    response = client.get("/console/")

    assert response.status_code == 500
    assert "Something went wrong on our side" in response.content.decode()
    assert [record.getMessage() for record in template_log] == []


def test_an_api_500_answers_the_apis_json(client, token, monkeypatch, template_log):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("opsconsole.api.operations.find_operation", broken)
    client.raise_request_exception = False

    response = client.get("/api/v1/operations/demo:R-1:v1:issue-refund", HTTP_AUTHORIZATION=f"Bearer {token}")

    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"status": "error", "reason": "internal_error", "errors": []}
    assert template_log == []


def test_an_unhandled_errors_record_carries_no_message_to_any_handler(client, person, monkeypatch):
    """Not only the JSON log: a handler of another format (a developer's console, an error tracker)
    gets django.request's record with the traceback and the type, and never the message."""
    client.force_login(person("viewer", "viewer"))
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("django.request").addHandler(handler)

    def broken(*args, **kwargs):
        raise RuntimeError("customer C-" + "3003 refund")

    monkeypatch.setattr("opsconsole.console.views.oldest_due_seconds", broken)
    client.raise_request_exception = False
    try:
        assert client.get("/console/").status_code == 500
    finally:
        logging.getLogger("django.request").removeHandler(handler)

    [record] = records
    printed = logging.Formatter().format(record)
    assert "in broken" in printed
    assert "builtins.RuntimeError (message withheld)" in printed
    assert "C-3003" not in printed
