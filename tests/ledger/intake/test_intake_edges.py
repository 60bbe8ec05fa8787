"""What an adversarial review found at intake's edges, through the API
with a real workspace token (and ``manage.py submit``):

- one mailbox is one key: an email address is trimmed and its domain lower-cased (IDNA), its local
  part kept; control characters are refused;
- a duplicate JSON key, at any level, is refused (400 ``duplicate_key``, naming its path);
- bodies are read as HTTP says: chunked (tests/faults/test_http_bodies.py sends it through
  gunicorn), gzip decoded within the limit, any other encoding or charset refused (415);
- ``occurred_at`` is an RFC 3339 string, never a number or digits;
- the published schema states the rules intake enforces.
"""

import gzip
import io
import json
import unicodedata

import pytest
from django.conf import settings

from ledger.keys import hashed_component
from ledger.models import Delivery, Operation
from tests.conftest import event
from tests.ledger.management.test_commands import json_lines, run

WELCOME = {"email": "ann.lee@example.com", "version": 1, "language": "en"}


def welcome(api, delivery_id="d-1", **data):
    return api.post("/api/v1/events", {"action": "send-welcome", "delivery_id": delivery_id, "data": WELCOME | data})


def assert_recorded_as_invalid(response, count: int = 1):
    deliveries = list(Delivery.objects.order_by("pk"))
    assert len(deliveries) == count
    assert deliveries[-1].outcome == Delivery.Outcome.INVALID
    assert deliveries[-1].errors == response.json()["errors"]
    assert Operation.objects.count() == 0


def fields_of(response) -> list[str]:
    return [error["field"] for error in response.json()["errors"]]


# --- one mailbox, one key --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spelling",
    [
        "ann.lee@EXAMPLE.com",
        "ann.lee@Example.Com",
        "  ann.lee@example.com ",
        "\u00a0ann.lee@example.COM\u3000",  # no-break and ideographic spaces are trimmed too
        "ann.lee@example.com.",  # the DNS root's trailing dot names the same domain
        "ann.lee@Example.COM. ",
    ],
)
def test_it_gives_one_mailbox_one_key_however_its_domain_and_margins_are_written(api, spelling):
    first = welcome(api, "d-1")
    again = welcome(api, "d-2", email=spelling)

    assert (first.status_code, again.status_code) == (201, 200), again.content
    assert again.json()["key"] == first.json()["key"]
    # The normalised address is what is stored (and sent, fingerprinted, keyed).
    assert Operation.objects.get().payload["email"] == "ann.lee@example.com"


def test_it_gives_an_internationalised_domain_one_key_in_each_of_its_forms(api):
    forms = [
        "zoe@bücher.example",
        "zoe@BÜCHER.Example",
        "zoe@xn--bcher-kva.example",
        "zoe@bücher.example.",
        unicodedata.normalize("NFD", "zoe@bücher.example"),
    ]

    answers = [welcome(api, f"d-{n}", email=form) for n, form in enumerate(forms)]

    assert [answer.status_code for answer in answers] == [201, 200, 200, 200, 200], [a.content for a in answers]
    assert len({answer.json()["key"] for answer in answers}) == 1
    assert Operation.objects.get().payload["email"] == "zoe@xn--bcher-kva.example"


def test_it_keeps_the_local_part_as_sent(api):
    """The documented choice: only the receiving server may say Ann and ann are one mailbox."""
    lower = welcome(api, "d-1", email="ann@example.com")
    upper = welcome(api, "d-2", email="Ann@example.com")

    assert (lower.status_code, upper.status_code) == (201, 201)
    assert lower.json()["key"] != upper.json()["key"]


@pytest.mark.parametrize(
    "email",
    [
        "ann.lee@example.com\n",
        "ann.lee@example.com\r\n",
        "\tann.lee@example.com",
        "ann\x07.lee@example.com",
        "ann.lee@exam\x85ple.com",  # a C1 control (NEL)
        "ann.lee@example.com\x7f",
    ],
)
def test_it_refuses_an_email_with_a_control_character(api, email):
    response = welcome(api, email=email)

    assert response.status_code == 422, response.content
    assert fields_of(response) == ["data.email"]
    assert "ann" not in response.content.decode()  # the rule, never the value
    assert_recorded_as_invalid(response)


@pytest.mark.parametrize(
    "email",
    [
        "ann lee@example.com",
        "ann@exa mple.com",
        "ann@",
        "@example.com",
        "ann@b@example.com",
        "ann@bü_cher..example",
        "ann@.",
        "ann@example.com..",
        "ann@example..com",
        "ann@.example.com",
    ],
)
def test_it_refuses_what_is_not_an_email_address(api, email):
    response = welcome(api, email=email)

    assert response.status_code == 422, response.content
    assert fields_of(response) == ["data.email"]


def test_it_keys_the_normalised_address_by_its_keyed_hash(api):
    key = welcome(api, email=" ann.lee@EXAMPLE.com").json()["key"]

    hashed = hashed_component("demo", "email", "ann.lee@example.com", secret=settings.OPSCONSOLE_KEY_SECRET)
    assert key == f"demo:{hashed}:v1:send-welcome"


def test_an_erasure_finds_the_address_however_it_is_typed(api, person, standin):
    """The ledger holds the normalised address: an admin typing it as the subject wrote it erases it."""
    from django.core.management import call_command

    from ledger.engine.processing import process_due_operations

    person("boss", "admin")
    welcome(api, email=" ann.lee@EXAMPLE.com")
    process_due_operations()
    assert Operation.objects.get().state == "succeeded"

    call_command(
        "erase",
        "--workspace",
        "demo",
        "--field",
        "email",
        "--value",
        "ann.lee@Example.COM",
        "--as",
        "boss",
        "--reason",
        "erasure request ER-17",
        stdout=io.StringIO(),
    )

    assert Operation.objects.get().payload["email"] == "[redacted]"


@pytest.mark.parametrize("request_id", ["R-42\n", "R-\x1b42", "R-42\x9f"])
def test_it_refuses_a_request_id_with_a_control_character(api, request_id):
    """An opaque identifier is kept exactly as sent, so an invisible character would make another key."""
    response = api.post("/api/v1/events", event(request_id=request_id))

    assert response.status_code == 422, response.content
    assert fields_of(response) == ["data.request_id"]


# --- duplicate JSON keys ---------------------------------------------------------------------------

BRIEF = '{"request_id": "R-42", "version": 3, "title": "Review renewal options", "owner": "ops"}'
DUPLICATED = {
    "two data objects": ('{"action": "prepare-brief", "data": ' + BRIEF + ', "data": ' + BRIEF + "}", "data"),
    "two versions": (
        '{"action": "prepare-brief", "data": {"request_id": "R-42", "version": 3, "version": 4, '
        '"title": "T", "owner": "ops"}}',
        "data.version",
    ),
    "two actions": ('{"action": "prepare-brief", "action": "update-status", "data": ' + BRIEF + "}", "action"),
    "deep in the data": (
        '{"action": "prepare-brief", "data": {"notes": [{"x": 1}, {"y": {"z": 1, "z": 2}}]}}',
        "data.notes[1].y.z",
    ),
}


@pytest.mark.parametrize(("body", "path"), DUPLICATED.values(), ids=DUPLICATED.keys())
def test_it_refuses_a_duplicate_key_naming_its_path(api, body, path):
    response = api.post("/api/v1/events", body.encode())

    assert response.status_code == 400, response.content
    answer = response.json()
    assert (answer["status"], answer["reason"]) == ("blocked", "duplicate_key")
    assert fields_of(response) == [path]
    assert_recorded_as_invalid(response)


def test_it_refuses_a_batch_with_two_event_lists(api):
    one = json.dumps([event("d-1", request_id="R-1")])
    two = json.dumps([event("d-2", request_id="R-2")])

    response = api.post("/api/v1/events/batch", f'{{"events": {one}, "events": {two}}}'.encode())

    assert response.status_code == 400, response.content
    assert response.json()["reason"] == "duplicate_key"
    assert fields_of(response) == ["events"]
    assert_recorded_as_invalid(response)


def test_it_refuses_a_batch_whose_fourth_event_holds_two_data_objects(api):
    good = [json.dumps(event(f"d-{n}", request_id=f"R-{n}")) for n in range(3)]
    bad = '{"action": "prepare-brief", "data": ' + BRIEF + ', "data": ' + BRIEF + "}"

    response = api.post("/api/v1/events/batch", ('{"events": [' + ", ".join([*good, bad]) + "]}").encode())

    assert response.status_code == 400, response.content
    assert response.json()["reason"] == "duplicate_key"
    assert fields_of(response) == ["events[3].data"]
    assert_recorded_as_invalid(response)


def test_the_command_line_refuses_a_duplicate_key_the_same_way(workspace, monkeypatch):
    line = '{"action": "prepare-brief", "data": ' + BRIEF + ', "data": ' + BRIEF + "}"

    lines, status = run(
        "submit", "-", "--workspace", "demo", stdin=json_lines(line, event("d-2")), monkeypatch=monkeypatch
    )

    assert status == 1
    first, second = (json.loads(text) for text in lines)
    assert (first["http_status"], first["reason"], first["errors"][0]["field"]) == (400, "duplicate_key", "data")
    assert second["status"] == "accepted"
    assert Delivery.objects.filter(outcome=Delivery.Outcome.INVALID).count() == 1


# --- bodies read as HTTP says ------------------------------------------------------------------------


@pytest.mark.parametrize("charset", ["latin-1", "ISO-8859-1", "utf-16", "us-ascii"])
def test_it_refuses_a_charset_other_than_utf8_with_415(api, charset):
    response = api.post(
        "/api/v1/events", json.dumps(event()).encode(), CONTENT_TYPE=f"application/json; charset={charset}"
    )

    assert response.status_code == 415, response.content
    assert response.json()["reason"] == "unsupported_charset"
    assert fields_of(response) == ["Content-Type"]
    assert_recorded_as_invalid(response)


@pytest.mark.parametrize("charset", ["utf-8", "UTF-8", '"utf-8"', "utf8"])
def test_it_takes_utf8_however_it_is_spelled(api, charset):
    response = api.post(
        "/api/v1/events", json.dumps(event()).encode(), CONTENT_TYPE=f"application/json; charset={charset}"
    )
    assert response.status_code == 201, response.content


def test_it_reads_bytes_as_utf8_only(api):
    """Python's json would guess UTF-16 from the bytes; a JSON body is UTF-8 (RFC 8259)."""
    response = api.post("/api/v1/events", json.dumps(event()).encode("utf-16"))

    assert response.status_code == 400, response.content
    assert response.json()["errors"] == [{"field": "body", "message": "malformed JSON: the body is not UTF-8 text"}]
    assert_recorded_as_invalid(response)


def test_it_decodes_a_gzip_body(api):
    body = gzip.compress(json.dumps(event()).encode())

    response = api.post("/api/v1/events", body, HTTP_CONTENT_ENCODING="gzip")

    assert response.status_code == 201, response.content
    assert Operation.objects.get().payload["title"] == "Review renewal options"


def test_it_decodes_a_gzip_batch(api):
    body = gzip.compress(json.dumps({"events": [event("d-1"), event("d-2", version=4)]}).encode())

    response = api.post("/api/v1/events/batch", body, HTTP_CONTENT_ENCODING="gzip")

    assert response.status_code == 200, response.content
    assert [r["http_status"] for r in response.json()["results"]] == [201, 201]


def test_it_refuses_a_gzip_bomb_by_its_decoded_size(api):
    """64 MB of spaces inside a valid event, compressed to about 64 kB: refused 413 once the decoded
    bytes pass the limit, without decoding the rest."""
    padded = json.dumps(event())[:-1] + " " * (64 * 1024 * 1024) + "}"
    body = gzip.compress(padded.encode(), compresslevel=9)
    assert len(body) < settings.OPSCONSOLE_MAX_BATCH_BODY_BYTES

    response = api.post("/api/v1/events", body, HTTP_CONTENT_ENCODING="gzip")

    assert response.status_code == 413, response.content
    assert response.json()["reason"] == "too_large"
    assert response.json()["limit_bytes"] == settings.OPSCONSOLE_MAX_BODY_BYTES
    assert_recorded_as_invalid(response)


def test_it_refuses_a_body_that_is_not_the_gzip_it_says(api):
    response = api.post("/api/v1/events", json.dumps(event()).encode(), HTTP_CONTENT_ENCODING="gzip")

    assert response.status_code == 400, response.content
    assert response.json()["reason"] == "malformed_request"
    assert fields_of(response) == ["Content-Encoding"]
    assert_recorded_as_invalid(response)


@pytest.mark.parametrize("encoding", ["br", "deflate", "compress", "gzip, gzip", "zstd"])
def test_it_refuses_any_other_content_encoding_with_415(api, encoding):
    response = api.post("/api/v1/events", json.dumps(event()).encode(), HTTP_CONTENT_ENCODING=encoding)

    assert response.status_code == 415, response.content
    assert response.json()["reason"] == "unsupported_encoding"
    assert fields_of(response) == ["Content-Encoding"]
    assert response["Accept-Encoding"] == "gzip"
    assert_recorded_as_invalid(response)


def test_it_takes_the_identity_encoding(api):
    response = api.post("/api/v1/events", json.dumps(event()).encode(), HTTP_CONTENT_ENCODING="identity")
    assert response.status_code == 201, response.content


def chunked(api, body: bytes, path="/api/v1/events"):
    """What gunicorn hands Django for a chunked body: no Content-Length, the transfer coding named,
    and an input stream that ends where the (decoded) body ends."""
    return api.post(
        path,
        b"",
        CONTENT_TYPE="application/json",
        CONTENT_LENGTH="",
        HTTP_TRANSFER_ENCODING="chunked",
        **{"wsgi.input": io.BytesIO(body), "wsgi.input_terminated": True},
    )


def test_it_reads_a_chunked_body(api):
    response = chunked(api, json.dumps(event()).encode())

    assert response.status_code == 201, response.content


def test_it_says_so_when_its_server_cannot_read_a_chunked_body(api):
    """A server that passes the chunks on undecoded, with no end to its input (runserver): refused
    by name, not read as an empty body."""
    body = json.dumps(event()).encode()
    response = api.post(
        "/api/v1/events",
        b"",
        CONTENT_TYPE="application/json",
        CONTENT_LENGTH="",
        HTTP_TRANSFER_ENCODING="chunked",
        **{"wsgi.input": io.BytesIO(body)},
    )

    assert response.status_code == 400, response.content
    assert (response.json()["reason"], fields_of(response)) == ("malformed_request", ["Transfer-Encoding"])
    assert_recorded_as_invalid(response)


def test_it_counts_a_chunked_body_against_the_limit_while_reading(api):
    body = json.dumps(event(title="x" * settings.OPSCONSOLE_MAX_BODY_BYTES)).encode()

    response = chunked(api, body)

    assert response.status_code == 413, response.content
    assert response.json()["reason"] == "too_large"
    assert_recorded_as_invalid(response)


@pytest.mark.parametrize(
    "occurred_at",
    [
        "1764748800",
        "1764748800.5",
        "2025-12-03T08:00Z",
        "2025-12-03",
        "2025-12-03 08:00:00Z",
        "20251203T080000Z",
        "2025-12-03T08:00:00+0100",
    ],
)
def test_it_takes_only_rfc3339_times(api, occurred_at):
    response = api.post("/api/v1/events", event() | {"occurred_at": occurred_at})

    assert response.status_code == 422, response.content
    assert fields_of(response) == ["occurred_at"]


@pytest.mark.parametrize(
    "occurred_at", ["2025-12-03T08:00:00Z", "2025-12-03t08:00:00.123456z", "2025-12-03T09:00:00+01:00"]
)
def test_it_takes_an_rfc3339_time(api, occurred_at, time_machine):
    time_machine.move_to("2025-12-03T08:00:00Z")
    response = api.post("/api/v1/events", event() | {"occurred_at": occurred_at})
    assert response.status_code == 201, response.content


# --- the schema states what intake enforces ------------------------------------------------------------


@pytest.fixture
def published(client):
    return client.get("/api/v1/openapi.json").json()


def test_the_schema_states_the_request_id_rules(published):
    data = published["components"]["schemas"]["PrepareBriefData"]["properties"]["request_id"]
    assert data["minLength"] == 1
    assert data["maxLength"] == 200
    assert "pattern" in data


def test_the_schema_states_the_email_and_time_rules(published):
    schemas = published["components"]["schemas"]
    assert "pattern" in schemas["WelcomeData"]["properties"]["email"]
    occurred_at = next(
        option
        for option in schemas["PrepareBriefEvent"]["properties"]["occurred_at"]["anyOf"]
        if option.get("type") == "string"
    )
    assert occurred_at["format"] == "date-time"
    assert "pattern" in occurred_at


def test_the_schema_publishes_the_duplicate_key_and_415_answers(published):
    answers = published["paths"]["/api/v1/events"]["post"]["responses"]
    text = json.dumps(published)
    assert "400" in answers
    assert "415" in answers
    assert '"duplicate_key"' in text
    assert '"unsupported_encoding"' in text
    assert '"unsupported_charset"' in text
