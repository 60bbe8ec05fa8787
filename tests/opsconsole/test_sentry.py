"""Sentry hears about a 500, and learns where and what (the route, the exception's type, its frames)
but never what was sent: no payload value, whether in the exception's message, a frame's local
variables, the request's body or query string, a breadcrumb or the command line.

The events go to a transport of this test's own (sentry_sdk's place for one), which keeps each
envelope as it would be sent; everything else is the project's own Sentry set-up
(``opsconsole.sentry.init_sentry``, what settings.py calls when SENTRY_DSN is set).
"""

import json
import logging

import pytest
import sentry_sdk
from sentry_sdk.transport import Transport

from ledger.core import privacy
from opsconsole.sentry import init_sentry

pytestmark = pytest.mark.django_db

CUSTOMER = "C-7731-sentinel"
AMOUNT = 4321987
REFUND = {
    "action": "issue-refund",
    "delivery_id": "d-refund",
    "data": {"request_id": "R-77", "version": 1, "customer_id": CUSTOMER, "amount_cents": AMOUNT, "currency": "EUR"},
}
KEY = "demo:R-77:v1:issue-refund"
QUERY = "q=secret-query"  # up here: a frame's source lines are sent, and the test's own must not show it


class KeepingTransport(Transport):
    def __init__(self, options=None):
        super().__init__(options)
        self.envelopes = []

    def capture_envelope(self, envelope):
        self.envelopes.append(envelope)

    def sent(self) -> list[bytes]:
        return [envelope.serialize() for envelope in self.envelopes]

    def events(self) -> list[dict]:
        return [item.payload.json for envelope in self.envelopes for item in envelope.items if item.type == "event"]


@pytest.fixture
def sentry():
    transport = KeepingTransport()
    init_sentry("https://public@sentry.invalid/1", environment="test", transport=transport)
    yield transport
    sentry_sdk.get_client().close()
    sentry_sdk.init()  # no DSN: off again for the tests that follow


def test_its_own_switches_are_off(sentry):
    client = sentry_sdk.get_client()

    assert client.should_send_default_pii() is False
    assert client.options["include_local_variables"] is False
    assert client.options["max_request_body_size"] == "never"


def assert_no_payload_value(transport, *more):
    sent = b"\n".join(transport.sent())
    assert sent, "nothing was sent"
    for value in (CUSTOMER, str(AMOUNT), "R-77", QUERY, *more):
        assert value.encode() not in sent, f"{value} was sent to Sentry"


def call_wsgi(path: str, *, query: str, headers: dict[str, str]) -> str:
    """GET through the WSGI application gunicorn serves (opsconsole.wsgi), where the SDK sees the
    request as a server would: its URL, query string, headers and environment."""
    from io import BytesIO
    from wsgiref.util import setup_testing_defaults

    from opsconsole.wsgi import application

    environ = {
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "REQUEST_METHOD": "GET",
        "SERVER_NAME": "testserver",
        "wsgi.input": BytesIO(b""),
    }
    environ.update({"HTTP_" + name.upper().replace("-", "_"): value for name, value in headers.items()})
    setup_testing_defaults(environ)
    status = []
    body = b"".join(application(environ, lambda given, response_headers, exc_info=None: status.append(given)))
    assert body
    return status[0]


@pytest.mark.django_db(transaction=True)  # a WSGI request ends by closing what the test would keep open
def test_a_500_reading_an_operation_sends_its_route_and_type_and_no_payload_value(api, token, monkeypatch, sentry):
    assert api.post("/api/v1/events", REFUND).status_code == 201

    def masked_badly(values, action_name, *, reveal):
        amount = values["amount_cents"]  # a local holding a payload value
        raise ValueError(f"cannot mask {values['customer_id']} ({amount} cents)")  # a message quoting others

    monkeypatch.setattr(privacy, "masked", masked_badly)  # the bug this 500 stands for
    status = call_wsgi(
        f"/api/v1/operations/{KEY}",
        query=QUERY,
        headers={
            "Authorization": f"Bearer {token}",
            "X-Request-ID": "req-500",
            "Cookie": f"sessionid={CUSTOMER}",
            "X-Customer": CUSTOMER,
        },
    )
    sentry_sdk.flush()

    assert status.startswith("500")
    [event] = sentry.events()
    assert event["transaction"] == "/api/v1/operations/{key}"
    [exception] = event["exception"]["values"]
    assert (exception["type"], exception["value"]) == ("ValueError", "(message withheld)")
    assert exception["mechanism"]["handled"] is False
    assert "masked_badly" in [frame["function"] for frame in exception["stacktrace"]["frames"]]
    assert not any("vars" in frame for frame in exception["stacktrace"]["frames"])
    assert event["request"] == {"method": "GET"}
    assert event["tags"]["request_id"] == "req-500"
    assert_no_payload_value(sentry, token)


def test_a_500_while_submitting_sends_no_request_body_and_no_breadcrumb_text(api, client, monkeypatch, sentry):
    def fingerprint_badly(data, fields):
        raise RuntimeError(f"cannot fingerprint {json.dumps(data)}")

    monkeypatch.setattr("ledger.intake.submit.fingerprint", fingerprint_badly)
    client.raise_request_exception = False
    api.get("/api/v1/operations/demo:R-1:v1:prepare-brief")  # leaves breadcrumbs: queries, a log line
    response = api.post(f"/api/v1/events?{QUERY}", REFUND)
    sentry_sdk.flush()

    assert response.status_code == 500
    [event] = sentry.events()
    assert event["transaction"] == "/api/v1/events"
    assert event["exception"]["values"][-1]["type"] == "RuntimeError"
    assert "extra" not in event
    assert "user" not in event
    for crumb in event.get("breadcrumbs", {}).get("values", []):
        assert "message" not in crumb
        assert "data" not in crumb or (crumb["type"] == "http" and set(crumb["data"]) <= {"method", "status_code"})
    assert_no_payload_value(sentry)


def test_an_error_logged_by_a_worker_is_sent_without_its_message(sentry):
    try:
        int(CUSTOMER)
    except ValueError:
        logging.getLogger("ledger").error("could not read %s", "a value", exc_info=True)
    sentry_sdk.flush()

    [event] = sentry.events()
    assert event["logger"] == "ledger"
    assert event["logentry"] == {"message": "(message withheld)"}
    assert event["exception"]["values"][-1] == {
        **event["exception"]["values"][-1],
        "type": "ValueError",
        "value": "(message withheld)",
    }
    assert "sys.argv" not in json.dumps(event)
    assert CUSTOMER.encode() not in b"".join(sentry.sent())
