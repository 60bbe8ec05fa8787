"""Whatever a client sends is answered on purpose (400, 404, 413, 415, 422), never with a server
error, in the ledger's own body shape, and recorded as a delivery when it is an event.

Each case here once answered 500: numbers Python will not convert, text PostgreSQL cannot
store (NUL, lone surrogates), times it cannot hold, bodies that are not said to be JSON.
"""

import json
import logging
from datetime import UTC, datetime, timedelta

import pytest
from django.db import OperationalError

from ledger.models import AuditEvent, Delivery, Operation
from tests.conftest import R42, event

PRIVATE_TITLE = "Confidential: renegotiate the Acme renewal"
SURROGATE = "\ud800"  # json.dumps writes it as the escape "\ud800", as a hostile client would
HUGE = "9" * 4301  # one digit more than Python converts from text by default


def post_json_text(api, path, text: str, **extra):
    """POST text as it is on the wire (so numbers and escapes arrive exactly as written)."""
    return api.post(path, text.encode("utf-8"), **extra)


def assert_recorded_as_invalid(response):
    delivery = Delivery.objects.get()
    assert delivery.outcome == Delivery.Outcome.INVALID
    assert delivery.errors == response.json()["errors"]
    assert Operation.objects.count() == 0
    return delivery


def fields_of(answer) -> list[str]:
    return [error["field"] for error in answer["errors"]]


# --- numbers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "wrap"),
    [
        ("/api/v1/events", lambda body: body),
        ("/api/v1/events/batch", lambda body: '{"events": [' + body + "]}"),
    ],
)
def test_it_answers_a_number_longer_than_python_converts_as_malformed_json(api, path, wrap):
    """A JSON integer of 4,301 digits is refused as malformed JSON (400), naming the rule only."""
    body = wrap('{"action": "prepare-brief", "data": {"request_id": "R-42", "version": ' + HUGE + "}}")

    response = post_json_text(api, path, body)

    assert response.status_code == 400, response.content
    answer = response.json()
    assert (answer["status"], answer["reason"]) == ("blocked", "malformed_json")
    assert answer["errors"] == [{"field": "body", "message": "malformed JSON: a number has more than 4300 digits"}]
    assert "9999" not in response.content.decode()
    assert_recorded_as_invalid(response)


@pytest.mark.parametrize("path", ["/api/v1/events", "/api/v1/events/batch"])
def test_it_refuses_the_longest_convertible_number_by_the_field_it_breaks(api, path):
    """4,300 digits decode; the schema then refuses the version (422), without converting it back to text."""
    big = "9" * 4300
    one = (
        '{"action": "prepare-brief", "data": {"request_id": "R-42", "version": '
        + big
        + ', "title": "t", "owner": "ops"}}'
    )
    body = one if path.endswith("events") else '{"events": [' + one + "]}"

    response = post_json_text(api, path, body)

    answer = response.json() if path.endswith("events") else response.json()["results"][0]
    assert answer["reason"] == "invalid_input"
    assert fields_of(answer) == ["data.version"]
    assert big not in response.content.decode()


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_it_answers_nan_and_infinity_as_malformed_json(api, constant):
    """Python's decoder would take them; JSON has no such numbers."""
    response = post_json_text(
        api, "/api/v1/events", '{"action": "prepare-brief", "data": {"version": ' + constant + "}}"
    )

    assert response.status_code == 400
    assert response.json()["reason"] == "malformed_json"
    assert "NaN and Infinity" in response.json()["errors"][0]["message"]


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1" + "0" * 400 + ".5"])
@pytest.mark.parametrize(
    ("path", "wrap"),
    [
        ("/api/v1/events", lambda body: body),
        ("/api/v1/events/batch", lambda body: '{"events": [' + body + "]}"),
    ],
)
def test_it_answers_a_number_beyond_a_double_as_malformed_json(api, path, wrap, number):
    """Python would read it as infinity, which neither JSON nor the database can hold: refused as
    malformed (400) and recorded, not answered with a server error."""
    body = wrap('{"action": "prepare-brief", "data": {"request_id": "R-42", "version": 1, "x": ' + number + "}}")

    response = post_json_text(api, path, body)

    assert response.status_code == 400, response.content
    assert response.json()["reason"] == "malformed_json"
    assert response.json()["errors"] == [
        {"field": "body", "message": "malformed JSON: a number is too large (beyond ±1.7976931348623157e308)"}
    ]
    assert_recorded_as_invalid(response)


def test_it_keeps_a_number_a_double_holds(api):
    """The largest double and the smallest fractions read as numbers (the schema then judges them)."""
    data = '{"request_id": "R-42", "version": 1.7976931348623157e308, "title": 1e-400}'
    body = '{"action": "prepare-brief", "data": ' + data + "}"

    response = post_json_text(api, "/api/v1/events", body)

    assert response.status_code == 422
    assert sorted(fields_of(response.json())) == ["data.owner", "data.title", "data.version"]


@pytest.mark.parametrize("path", ["/api/v1/events", "/api/v1/events/batch"])
def test_it_answers_json_nested_deeper_than_64_levels_as_malformed(api, path):
    """Shallow enough for Python to decode, too deep to be walked safely again: refused at once."""
    nested = "[" * 70 + "]" * 70
    response = post_json_text(api, path, '{"events": [{"action": "prepare-brief", "data": {"x": ' + nested + "}}]}")

    assert response.status_code == 400
    assert response.json()["errors"][0]["message"] == "malformed JSON: nested deeper than 64 levels"


def test_it_refuses_a_content_length_that_is_not_a_number(api):
    """Django itself would fail reading such a body; the ledger says what is wrong with the request."""
    response = api.post("/api/v1/events", event(), CONTENT_LENGTH="12abc")

    assert response.status_code == 400
    assert response.json()["reason"] == "malformed_request"
    assert fields_of(response.json()) == ["Content-Length"]
    assert_recorded_as_invalid(response)


# --- text the database cannot store ------------------------------------------------------------


def brief(**data):
    return event(**({"title": PRIVATE_TITLE} | data))


UNSTORABLE = {
    "surrogate in the action": (brief() | {"action": "prepare" + SURROGATE}, "action"),
    "surrogate in the delivery id": (brief() | {"delivery_id": "d-" + SURROGATE}, "delivery_id"),
    "surrogate in the correlation id": (brief() | {"correlation_id": SURROGATE + "run"}, "correlation_id"),
    "surrogate in the occurred_at text": (brief() | {"occurred_at": "2026-01-01T00:00" + SURROGATE}, "occurred_at"),
    "surrogate in the title": (brief(title="Review " + SURROGATE), "data.title"),
    "surrogate in the request id": (brief(request_id="R-" + SURROGATE), "data.request_id"),
    "low surrogate in the owner": (brief(owner="\udc00ops"), "data.owner"),
    "surrogate in a field name": (brief() | {"data": R42 | {"no" + SURROGATE + "te": "x"}}, "data.no\\ud800te"),
    "surrogate deep in a value": (
        brief() | {"data": R42 | {"notes": [{"deep": ["x", SURROGATE]}]}},
        "data.notes.0.deep.1",
    ),
    "NUL and surrogate in the envelope": (brief() | {"extra\x00": SURROGATE}, "extra\\u0000"),
}


@pytest.mark.parametrize(("body", "field"), UNSTORABLE.values(), ids=UNSTORABLE.keys())
def test_it_refuses_text_the_database_cannot_store_naming_the_field(api, body, field):
    """A lone surrogate (valid as a JSON escape, not as Unicode) anywhere is a 422 naming the field,
    and the blocked delivery stores its labels without it."""
    response = post_json_text(api, "/api/v1/events", json.dumps(body))

    assert response.status_code == 422, response.content
    assert field in fields_of(response.json())
    delivery = assert_recorded_as_invalid(response)
    for label in (delivery.action, delivery.sender_delivery_id, delivery.correlation_id, json.dumps(delivery.errors)):
        label.encode("utf-8")  # what PostgreSQL needs: it raised UnicodeEncodeError before
        assert "\x00" not in label
    assert PRIVATE_TITLE not in response.content.decode()


def test_it_keeps_what_it_can_of_an_unstorable_label(api):
    """The labels of a blocked delivery keep their text, with U+FFFD for each lone surrogate."""
    api.post(
        "/api/v1/events",
        brief()
        | {
            "action": "prepare" + SURROGATE,
            "delivery_id": "d" + SURROGATE + "1",
            "correlation_id": "run\x00" + SURROGATE,
        },
    )
    delivery = Delivery.objects.get()
    labels = (delivery.action, delivery.sender_delivery_id, delivery.correlation_id)
    assert labels == ("prepare\ufffd", "d\ufffd1", "run\ufffd")


def test_it_answers_each_unstorable_batch_event_on_its_own(api):
    """In a batch, each such event is a 422 of its own; the good ones around it are accepted."""
    events = (
        [event("d-1", request_id="R-1")] + [body for body, _ in UNSTORABLE.values()] + [event("d-2", request_id="R-2")]
    )

    response = post_json_text(api, "/api/v1/events/batch", json.dumps({"events": events}))

    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["http_status"] for r in results] == [201] + [422] * len(UNSTORABLE) + [201]
    assert all(field in fields_of(r) for r, (_, field) in zip(results[1:-1], UNSTORABLE.values(), strict=True))
    assert Operation.objects.count() == 2


@pytest.mark.parametrize("limit_body", [{"title": "x" * 300 + SURROGATE}, {"no" + SURROGATE: "x" * 300}])
def test_it_measures_an_oversized_batch_event_even_when_it_holds_a_surrogate(api, settings, limit_body):
    """The per-event size limit measures the event as sent: a lone surrogate does not break it."""
    settings.OPSCONSOLE_MAX_BODY_BYTES = 200
    body = {"events": [{"action": "prepare-brief", "data": R42 | limit_body}]}

    response = post_json_text(api, "/api/v1/events/batch", json.dumps(body))

    assert response.json()["results"][0]["http_status"] == 413
    assert Delivery.objects.get().outcome == Delivery.Outcome.INVALID


# --- the key of GET /operations/{key} ----------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/operations/demo%00R-42",
        "/api/v1/operations/%00",
        "/api/v1/operations/demo:%ED%A0%80:v3:prepare-brief",
        "/api/v1/operations/%ED%A0%80",
        "/api/v1/operations/demo%2FR-42",
        "/api/v1/operations/demo/R-42/v3",
        "/api/v1/operations/" + "k" * 20_000,
        "/api/v1/operations/%F0%9F%92%A5%FF",
    ],
)
def test_it_answers_404_for_a_key_no_operation_can_have(api, path):
    """NUL (PostgreSQL refused the query), broken UTF-8, slashes and very long keys all answer a
    plain 404 in the API's shape, without repeating the key."""
    api.post("/api/v1/events", event())

    response = api.get(path)

    assert response.status_code == 404
    assert response.json() == {"status": "not_found", "detail": "No operation with this key in this workspace."}


# --- times -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("occurred_at", "message"),
    [
        ("2026-01-01T00:00:00+16:00", "must have a UTC offset between -15:59 and +15:59"),
        ("2026-01-01T00:00:00-16:00", "must have a UTC offset between -15:59 and +15:59"),
        ("2026-01-01T00:00:00+23:59", "must have a UTC offset between -15:59 and +15:59"),
        ("9999-12-31T23:59:59-14:00", "must be within 10 years of now"),
        ("0001-01-01T00:00:00+14:00", "must be within 10 years of now"),
        ("2037-01-02T00:00:00Z", "must be within 10 years of now"),
        ("2015-12-31T00:00:00Z", "must be within 10 years of now"),
        (1767225600, "must be an RFC 3339 date-time string with a UTC offset (2025-12-03T08:00:00Z)"),
    ],
)
def test_it_refuses_a_time_the_ledger_cannot_keep_or_show(api, time_machine, occurred_at, message):
    """Offsets PostgreSQL cannot store, and dates that made pages fail for everyone, are a 422."""
    time_machine.move_to(datetime(2026, 6, 1, tzinfo=UTC), tick=False)

    response = api.post("/api/v1/events", event() | {"occurred_at": occurred_at})

    assert response.status_code == 422, response.content
    assert response.json()["errors"] == [{"field": "occurred_at", "message": message}]
    assert_recorded_as_invalid(response)


@pytest.mark.parametrize(
    ("occurred_at", "stored"),
    [
        ("2026-06-01T12:00:00+15:59", datetime(2026, 5, 31, 20, 1, tzinfo=UTC)),
        ("2026-06-01T12:00:00-15:59", datetime(2026, 6, 2, 3, 59, tzinfo=UTC)),
        ("2016-06-03T00:00:00Z", datetime(2016, 6, 3, tzinfo=UTC)),
        ("2036-05-29T00:00:00Z", datetime(2036, 5, 29, tzinfo=UTC)),
    ],
)
def test_it_keeps_a_time_within_the_bounds_in_utc(api, workspace, time_machine, occurred_at, stored):
    """Offsets up to ±15:59 and times up to 10 years either side of now are accepted, stored in UTC
    (with a key window as long: older than it, an event is stale, tests/ledger/test_retention.py)."""
    from datetime import timedelta

    from ledger.core import policies

    policies.set_policy(workspace=workspace, action="prepare-brief", actor="test", key_retention=timedelta(days=3700))
    time_machine.move_to(datetime(2026, 6, 1, tzinfo=UTC), tick=False)

    response = api.post("/api/v1/events", event() | {"occurred_at": occurred_at})

    assert response.status_code == 201, response.content
    assert Delivery.objects.get().occurred_at == stored


def test_it_shows_the_operation_page_of_an_event_with_the_latest_time_allowed(api, admin_client, time_machine):
    """The stored denial of service: an accepted time within the bounds never breaks a page."""
    time_machine.move_to(datetime(2026, 6, 1, tzinfo=UTC), tick=False)
    latest = datetime(2026, 6, 1, tzinfo=UTC) + timedelta(days=3653)
    operation_id = api.post("/api/v1/events", event() | {"occurred_at": latest.isoformat()}).json()["operation"]["id"]

    assert admin_client.get(f"/console/operations/{operation_id}/").status_code == 200
    assert admin_client.get("/admin/ledger/delivery/").status_code == 200


# --- media types -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/events", "/api/v1/events/batch"])
@pytest.mark.parametrize(
    "content_type",
    [
        "application/x-www-form-urlencoded",  # what curl -d sends unless told otherwise
        "text/plain",
        "multipart/form-data; boundary=x",
        "application/jsonp",
        "application/octet-stream",
        "",  # none at all (what Django reads when the header is missing)
    ],
)
def test_it_answers_a_body_not_said_to_be_json_with_415(client, token, path, content_type):
    """The body must be declared JSON; anything else is refused, recorded, and told what to send."""
    body = json.dumps(event() if path.endswith("events") else {"events": [event()]})

    response = client.generic("POST", path, body, CONTENT_TYPE=content_type, HTTP_AUTHORIZATION=f"Bearer {token}")

    assert response.status_code == 415
    assert response.json() == {
        "status": "blocked",
        "reason": "unsupported_media_type",
        "errors": [{"field": "Content-Type", "message": "must be application/json"}],
    }
    assert_recorded_as_invalid(response)


@pytest.mark.parametrize(
    "content_type", ["application/json; charset=utf-8", "Application/JSON", "application/vnd.opsconsole+json"]
)
def test_it_takes_any_json_media_type(api, content_type):
    """application/json with parameters, in any case, and the +json types are JSON."""
    response = api.post("/api/v1/events", event(), CONTENT_TYPE=content_type)
    assert response.status_code == 201, response.content


# --- a batch is per event ----------------------------------------------------------------------


def counts():
    return {
        "deliveries": Delivery.objects.count(),
        "operations": Operation.objects.count(),
        "reserved": AuditEvent.objects.filter(kind="reserved").count(),
    }


def test_it_keeps_the_good_events_around_a_bad_one(api):
    """A bad event between good ones leaves only its own invalid delivery; the good ones stand."""
    events = [
        event("d-1", request_id="R-1"),
        brief(title="Review " + SURROGATE, request_id="R-2"),
        event("d-3", request_id="R-3"),
    ]

    response = post_json_text(api, "/api/v1/events/batch", json.dumps({"events": events}))

    assert [r["http_status"] for r in response.json()["results"]] == [201, 422, 201]
    assert counts() == {"deliveries": 3, "operations": 2, "reserved": 2}
    assert sorted(Operation.objects.values_list("payload__request_id", flat=True)) == ["R-1", "R-3"]
    assert Delivery.objects.filter(outcome="invalid", operation=None).count() == 1


@pytest.fixture
def writing_r2_fails(monkeypatch):
    """Writing request R-2 fails unexpectedly, in the database, whether it is written with the rest
    of its batch or alone: its operation row carries a state the table's CHECK constraint refuses."""
    from ledger.intake import reservation

    real = reservation._first_state

    def first_state(event):
        return "simulated-failure" if event.data["request_id"] == "R-2" else real(event)

    monkeypatch.setattr(reservation, "_first_state", first_state)


def test_it_answers_an_unexpected_failure_of_one_event_as_its_own_error(api, writing_r2_fails, caplog):
    """The failing event leaves no row at all (its delivery and operation roll back), is answered
    500 / error in its result, and is logged without its content; the batch answers 200."""
    events = [event("d-1", request_id="R-1"), brief(request_id="R-2"), event("d-3", request_id="R-3")]

    with caplog.at_level(logging.ERROR, logger="ledger"):
        response = api.post("/api/v1/events/batch", {"events": events})

    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["http_status"] for r in results] == [201, 500, 201]
    assert results[1] == {
        "index": 1,
        "http_status": 500,
        "status": "error",
        "reason": "internal_error",
        "errors": [
            {
                "field": "body",
                "message": "the event could not be recorded (a server error); nothing of it was kept, so it is safe to "
                "send again",
            }
        ],
    }
    assert counts() == {"deliveries": 2, "operations": 2, "reserved": 2}
    assert not Operation.objects.filter(payload__request_id="R-2").exists()
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.exc_info
    assert record.batch_index == 1
    assert record.workspace == "demo"
    assert PRIVATE_TITLE not in record.getMessage()


def test_it_accepts_the_failed_event_when_it_is_sent_again(api, writing_r2_fails, monkeypatch):
    """Nothing of the failed event was kept, so sending it again reserves it as new."""
    api.post("/api/v1/events/batch", {"events": [brief(request_id="R-2")]})
    monkeypatch.undo()

    again = api.post("/api/v1/events/batch", {"events": [brief(request_id="R-2")]})

    assert again.json()["results"][0]["http_status"] == 201


def test_it_stops_the_batch_when_the_database_is_unavailable(api, monkeypatch):
    """An unreachable database is no one event's fault: the request fails (503 from the error
    middleware) and nothing of the batch is kept, so the whole batch can be sent again."""
    from ledger.intake import reservation

    def reserve(workspace, events, **kwargs):
        raise OperationalError("connection to server lost")

    monkeypatch.setattr(reservation, "reserve", reserve)
    events = [event("d-1", request_id="R-1"), event("d-2", request_id="R-2"), event("d-3", request_id="R-3")]

    response = api.post("/api/v1/events/batch", {"events": events})

    assert (response.status_code, response["Retry-After"], response.json()["status"]) == (503, "5", "unavailable")
    assert counts() == {"deliveries": 0, "operations": 0, "reserved": 0}


# --- what errors say ---------------------------------------------------------------------------


def test_it_names_an_unknown_action_without_repeating_it(api):
    """The error lists the known actions, never the name that was sent."""
    response = api.post("/api/v1/events", event() | {"action": "exfiltrate-the-ledger"})

    assert response.status_code == 422
    assert "exfiltrate" not in response.content.decode()
    assert response.json()["errors"][0]["message"].startswith("is not a known action; known: ")
