import base64
import html
from urllib.parse import quote

import httpx
import pytest

from tests.standin.conftest import add_faults, records

BODY = {"reference": "INV-1", "payload": {"amount": 42}}
KEY = {"Idempotency-Key": "op-1"}
NO_FAULTS = {"faults": [], "lookup_faults": []}


def test_it_answers_an_injected_status_without_creating_anything(http):
    """A status fault answers that status (with Retry-After when given) and creates nothing."""
    add_faults(http, {"kind": "status", "status": 503, "retry_after": 2})

    response = http.post("/records", json=BODY, headers=KEY)

    assert response.status_code == 503
    assert response.headers["Retry-After"] == "2"
    assert response.json()["error"] == "injected_fault"
    assert records(http) == []
    # The key was not used up: the retry creates the record.
    assert http.post("/records", json=BODY, headers=KEY).status_code == 201


def test_a_status_fault_says_the_code_and_words_it_is_given(http):
    """A status fault may carry a vendor's code and words, so tests can refuse for many reasons."""
    add_faults(http, {"kind": "status", "status": 400, "error": "owner_unknown", "detail": "no owner ops-9"})

    response = http.post("/records", json=BODY, headers=KEY)

    assert (response.status_code, response.json()) == (400, {"error": "owner_unknown", "detail": "no owner ops-9"})
    assert records(http) == []


def test_it_omits_retry_after_when_the_fault_has_none(http):
    """retry_after is optional."""
    add_faults(http, {"kind": "status", "status": 500})

    response = http.post("/records", json=BODY)

    assert response.status_code == 500
    assert "retry-after" not in response.headers


def test_it_hangs_up_before_creating_on_reset_before(http):
    """reset_before closes the connection unanswered; nothing is created."""
    add_faults(http, {"kind": "reset_before"})

    with pytest.raises(httpx.RemoteProtocolError):
        http.post("/records", json=BODY, headers=KEY)

    assert records(http) == []
    assert http.get("/_stats").json()["records"] == 0


def test_it_hangs_up_after_creating_on_drop_after_commit(http):
    """drop_after_commit creates the record, then hangs up: the client errors but the record exists,
    findable by reference and by idempotency key, and a keyed retry replays it."""
    add_faults(http, {"kind": "drop_after_commit"})

    with pytest.raises(httpx.RemoteProtocolError):
        http.post("/records", json=BODY, headers=KEY)

    [by_reference] = records(http, reference="INV-1")
    assert records(http, idempotency_key="op-1") == [by_reference]
    assert by_reference["payload"] == {"amount": 42}

    retry = http.post("/records", json=BODY, headers=KEY)
    assert retry.status_code == 200
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.json() == by_reference


def test_it_has_acted_before_a_delayed_answer_times_out(http):
    """delay creates the record before sleeping, so a client that times out still caused the effect."""
    add_faults(http, {"kind": "delay", "seconds": 30})

    with pytest.raises(httpx.ReadTimeout):
        http.post("/records", json=BODY, headers=KEY, timeout=0.2)

    assert [r["idempotency_key"] for r in records(http, reference="INV-1")] == ["op-1"]


def test_it_answers_after_the_delay(http):
    """A client that waits out the delay gets the normal 201."""
    add_faults(http, {"kind": "delay", "seconds": 0.05})

    response = http.post("/records", json=BODY)

    assert response.status_code == 201
    assert records(http) == [response.json()]


def test_it_consumes_faults_in_order_one_per_post(http):
    """Faults form a FIFO queue, one per POST /records; after the queue drains, POSTs succeed."""
    add_faults(http, {"kind": "status", "status": 503})
    pending = add_faults(http, {"kind": "status", "status": 429, "retry_after": 1}, {"kind": "status", "status": 500})
    assert [f["status"] for f in pending] == [503, 429, 500]

    assert http.post("/records", json=BODY).status_code == 503
    assert [f["status"] for f in http.get("/_faults").json()["faults"]] == [429, 500]
    assert http.post("/records", json=BODY).status_code == 429
    assert http.post("/records", json=BODY).status_code == 500
    assert http.post("/records", json=BODY).status_code == 201
    assert http.get("/_faults").json() == NO_FAULTS


def test_it_serves_lookups_while_faults_are_pending(http):
    """Create faults affect only POST /records: lookups and health answer and leave the queue alone."""
    created = http.post("/records", json=BODY).json()
    add_faults(http, {"kind": "reset_before"}, {"kind": "drop_after_commit"})

    assert http.get("/health").status_code == 200
    assert http.get(f"/records/{created['id']}").json() == created
    assert records(http, reference="INV-1") == [created]
    assert [f["kind"] for f in http.get("/_faults").json()["faults"]] == ["reset_before", "drop_after_commit"]


@pytest.mark.parametrize(
    "fault",
    [
        {"kind": "explode"},
        {"kind": "status"},
        {"kind": "status", "status": 200},
        {"kind": "status", "status": 503, "retry_after": -1},
        {"kind": "delay"},
        {"kind": "delay", "seconds": "3"},
        {"kind": "status", "status": 400, "error": 7},
        {"kind": "status", "status": 400, "detail": "  "},
        {"kind": "status", "status": 400, "detail": "x" * 501},
        "reset_before",
        {"kind": "echo_credential", "status": 200},
        {"kind": "echo_credential", "status": "401"},
    ],
)
def test_it_refuses_a_bad_fault_and_queues_none_of_the_list(http, fault):
    """A bad fault is a 400 and no fault from that list is queued."""
    response = http.post("/_faults", json={"faults": [{"kind": "reset_before"}, fault]})

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_fault"
    assert http.get("/_faults").json() == NO_FAULTS


@pytest.mark.parametrize(
    ("headers", "credential"),
    [
        ({"Authorization": "Bearer sk_live_51Hq/Zx+k9"}, "sk_live_51Hq/Zx+k9"),
        ({"Authorization": "Basic " + base64.b64encode(b"ann:pa55/word").decode()}, "ann:pa55/word"),
        ({"X-Api-Key": "key-123456789"}, "key-123456789"),
    ],
)
def test_an_echo_fault_quotes_the_credential_it_was_sent_in_every_form_and_creates_nothing(http, headers, credential):
    """echo_credential plays a careless vendor: the refusal quotes the request's credential, \\u-escaped
    in its words and in each common encoding, and its request id is built from it."""
    add_faults(http, {"kind": "echo_credential"})

    response = http.post("/records", json=BODY, headers=headers)

    raw = credential.encode()
    assert response.status_code == 401
    assert f"\\u{ord(credential[0]):04x}" in response.text  # the words are escaped, as some encoders write them
    said = response.json()
    basic = "Basic " + base64.b64encode(b"api:" + raw).decode()
    assert said["error"] == "invalid_api_key"
    assert said["detail"] == f"Invalid API key provided: {credential}; as sent: {basic}"
    escaped = "".join(f"\\u{ord(char):04x}" for char in credential)
    named = said["received"].pop("html_named")  # each character that has an HTML5 name written by it
    assert html.unescape(named) == credential
    assert said["received"] == {
        "bearer": f"Bearer {credential}",
        "basic": basic,
        "base64": base64.b64encode(raw).decode(),
        "base64_unpadded": base64.b64encode(raw).decode().rstrip("="),
        "base64url": base64.urlsafe_b64encode(raw).decode(),
        "base64url_unpadded": base64.urlsafe_b64encode(raw).decode().rstrip("="),
        "base32": base64.b32encode(raw).decode(),
        "percent": quote(credential, safe=""),
        "percent_json_escaped": quote(escaped, safe=""),
        "hex": raw.hex(),
        "hex_upper": raw.hex().upper(),
        "hex_colons": ":".join(f"{byte:02x}" for byte in raw),
        "hex_spaces": " ".join(f"{byte:02x}" for byte in raw),
        "utf16_hex": credential.encode("utf-16-be").hex(),
        "x_escaped": "".join(f"\\x{byte:02x}" for byte in raw),
        "json_in_json": '{"key": "' + escaped + '"}',
        "html_decimal": "".join(f"&#{ord(char)};" for char in credential),
        "html_hex": "".join(f"&#x{ord(char):x};" for char in credential),
        "groups": " ".join(credential[i : i + 4] for i in range(0, len(credential), 4)),
        "dashed": "-".join(credential[i : i + 5] for i in range(0, len(credential), 5)),
        "truncated": credential[:12] + "...",
        "reversed_base64": base64.b64encode(raw).decode()[::-1],
    }
    assert response.headers["X-Request-Id"] == "req_" + base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert records(http) == []


def test_an_echo_fault_answers_a_lookup_too(http):
    add_faults(http, {"on": "lookup", "kind": "echo_credential", "status": 403})

    response = http.get("/records", headers={"Authorization": "Bearer tok-abcdefgh"})

    assert response.status_code == 403
    assert response.json()["received"]["hex"] == b"tok-abcdefgh".hex()
    assert http.get("/records").status_code == 200  # one lookup, one fault
