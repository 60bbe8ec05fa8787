"""What the tests of configured destinations rely on in the third-party servers (tests/third_party.py),
shown through httpx against the real processes: json-server creates on every POST and finds by field;
stripe-stateful-mock answers a repeated Idempotency-Key with the first object and refuses it with
other parameters."""

import os
import signal
import socket
import time

import httpx
import pytest

from tests import third_party

# Each test runs a node server.
pytestmark = [third_party.needs_node, pytest.mark.processes]

TICKET = {"source_key": "op_01HZX", "title": "Printer on fire", "priority": "high"}


# json-server: a REST API with no idempotency.


def test_json_server_creates_a_ticket_for_every_post_of_the_same_body(json_server):
    first = httpx.post(f"{json_server.url}/tickets", json=TICKET)
    second = httpx.post(f"{json_server.url}/tickets", json=TICKET)

    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json() == {**TICKET, "id": 1}
    assert second.json() == {**TICKET, "id": 2}
    assert first.headers["location"].endswith("/tickets/1")
    assert httpx.get(f"{json_server.url}/tickets/2").json() == {**TICKET, "id": 2}
    assert json_server.db() == {"tickets": [{**TICKET, "id": 1}, {**TICKET, "id": 2}]}  # what it holds
    assert [(r["method"], r["path"], r["status"]) for r in json_server.requests()] == [
        ("POST", "/tickets", 201),
        ("POST", "/tickets", 201),
        ("GET", "/tickets/2", 200),
    ]


def test_json_server_finds_tickets_by_field_and_answers_404_for_a_missing_id(json_server):
    for key in ("op_a", "op_b", "op_b"):
        httpx.post(f"{json_server.url}/tickets", json={"source_key": key}).raise_for_status()

    def by_key(key):
        found = httpx.get(f"{json_server.url}/tickets", params={"source_key": key})
        assert found.status_code == 200
        return [ticket["id"] for ticket in found.json()]

    assert by_key("op_a") == [1]
    assert by_key("op_b") == [2, 3]  # the lookup sees duplicates: nothing stopped them
    assert by_key("op_none") == []
    missing = httpx.get(f"{json_server.url}/tickets/99")
    assert (missing.status_code, missing.json()) == (404, {})


def test_json_server_serves_given_resources_and_delays_answers(tmp_path):
    tickets = [{"id": 7, "source_key": "op_seeded"}]
    with third_party.running_json_server(tmp_path, {"tickets": tickets, "users": []}, delay_ms=300) as server:
        started = time.monotonic()
        answer = httpx.get(f"{server.url}/tickets/7")
        elapsed = time.monotonic() - started
        assert httpx.get(f"{server.url}/users").json() == []
        created = httpx.post(f"{server.url}/tickets", json={"source_key": "op_new"}).json()

    assert answer.json() == tickets[0]
    assert elapsed >= 0.3  # a client with a shorter timeout sees a timeout after the server acted
    assert created["id"] == 8
    # Times at the server: each request took the delay there too.
    assert all(r["finished"] - r["started"] >= 290 for r in server.requests())


def test_a_server_is_stopped_with_its_whole_group(tmp_path):
    with third_party.running_json_server(tmp_path) as server:
        pid = server.process.pid
        assert os.getpgid(pid) == pid  # its own session and group
    assert server.process.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url)


def test_a_server_that_cannot_start_fails_quoting_its_log(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = third_party.JsonServer(tmp_path)
        server.port = taken.getsockname()[1]
        server.url = f"http://127.0.0.1:{server.port}"
        with pytest.raises(third_party.ServerUnavailable) as failed:
            server.start()
    message = str(failed.value)
    assert "json-server exited with 1 before answering" in message
    assert "EADDRINUSE" in message
    assert str(server.log_path) in message


def test_a_missing_package_fails_naming_the_make_target(tmp_path, monkeypatch):
    (tmp_path / "package-lock.json").write_text((third_party.ROOT / "package-lock.json").read_text())
    monkeypatch.setattr(third_party.signers, "ROOT", tmp_path)
    with pytest.raises(third_party.ServerUnavailable, match="json-server 0.17.4 .* not installed.*make node_modules"):
        with third_party.running_json_server(tmp_path):
            pass


# stripe-stateful-mock: Stripe's API with its idempotency keys.

AUTH = {"Authorization": f"Bearer {third_party.STRIPE_TEST_KEY}"}
CHARGE = {"amount": "2500", "currency": "usd", "source": "tok_visa", "metadata[operation]": "op_01HZX"}


def charge(stripe_mock, data, key=None):
    headers = AUTH if key is None else {**AUTH, "Idempotency-Key": key}
    return httpx.post(f"{stripe_mock.url}/v1/charges", data=data, headers=headers)


def charges(stripe_mock):
    listed = httpx.get(f"{stripe_mock.url}/v1/charges", headers=AUTH)
    assert listed.status_code == 200
    return [c["id"] for c in listed.json()["data"]]


def test_stripe_mock_answers_a_repeated_key_with_the_first_charge(stripe_mock):
    first = charge(stripe_mock, CHARGE, key="op_01HZX-1")
    again = charge(stripe_mock, CHARGE, key="op_01HZX-1")

    assert (first.status_code, again.status_code) == (200, 200)
    assert first.json()["id"].startswith("ch_")
    assert first.json()["status"] == "succeeded"
    assert first.json()["amount"] == 2500
    assert first.json()["metadata"] == {"operation": "op_01HZX"}
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert again.headers["original-request"] == first.headers["request-id"]
    # A quirk of the mock (0.0.16): a replayed answer is the stored JSON text sent as text/html, so a
    # client reads the body as JSON whatever its content type says.
    assert first.headers["content-type"].startswith("application/json")
    assert again.headers["content-type"].startswith("text/html")
    assert charges(stripe_mock) == [first.json()["id"]]  # one charge
    got = httpx.get(f"{stripe_mock.url}/v1/charges/{first.json()['id']}", headers=AUTH)
    assert got.status_code == 200
    assert got.json()["id"] == first.json()["id"]
    assert [r["idempotency_key"] for r in stripe_mock.requests()] == ["op_01HZX-1", "op_01HZX-1", None, None]


def test_stripe_mock_refuses_a_repeated_key_with_other_parameters(stripe_mock):
    first = charge(stripe_mock, CHARGE, key="op_01HZX-1")
    other = charge(stripe_mock, {**CHARGE, "amount": "9900"}, key="op_01HZX-1")

    assert first.status_code == 200
    assert other.status_code == 400
    assert other.json() == {
        "error": {
            "type": "idempotency_error",
            "message": "Keys for idempotent requests can only be used with the same parameters they were first "
            "used with. Try using a key other than 'op_01HZX-1' if you meant to execute a different request.",
        }
    }
    assert charges(stripe_mock) == [first.json()["id"]]  # nothing charged again
    assert "does not match stored body" in stripe_mock.log_path.read_text()
    # The key is bound to its path: the same key on another endpoint is another request.
    customer = httpx.post(f"{stripe_mock.url}/v1/customers", data={}, headers={**AUTH, "Idempotency-Key": "op_01HZX-1"})
    assert customer.status_code == 200


def test_stripe_mock_charges_again_without_a_key(stripe_mock):
    ids = [charge(stripe_mock, CHARGE).json()["id"] for _ in range(2)]
    assert len(set(ids)) == 2
    assert sorted(charges(stripe_mock)) == sorted(ids)


def test_stripe_mock_charges_a_customer_once_per_key(stripe_mock):
    created = httpx.post(
        f"{stripe_mock.url}/v1/customers",
        data={"email": "ops@example.com", "source": "tok_visa"},
        headers={**AUTH, "Idempotency-Key": "customer-ops"},
    )
    assert created.status_code == 200
    customer = created.json()["id"]
    assert customer.startswith("cus_")
    assert created.json()["default_source"].startswith("card_")

    data = {"amount": "1200", "currency": "eur", "customer": customer, "metadata[operation]": "op_7"}
    answers = [charge(stripe_mock, data, key="charge-customer-op_7") for _ in range(5)]
    assert {a.status_code for a in answers} == {200}
    assert {a.json()["id"] for a in answers} == {answers[0].json()["id"]}
    charged = answers[0].json()
    assert charged["source"]["customer"] == customer
    assert charged["metadata"] == {"operation": "op_7"}
    # Unlike Stripe, the mock leaves a charge's `customer` empty (0.0.16, getChargeFromCard), so
    # listing by customer finds nothing: a lookup or an audit matches charges by their metadata.
    assert charged["customer"] is None
    listed = httpx.get(f"{stripe_mock.url}/v1/charges", params={"customer": customer}, headers=AUTH).json()
    assert listed["data"] == []
    everything = httpx.get(f"{stripe_mock.url}/v1/charges", headers=AUTH).json()["data"]
    assert [c["id"] for c in everything if c["metadata"].get("operation") == "op_7"] == [charged["id"]]


def test_stripe_mock_answers_like_stripe_to_bad_keys_and_failing_tokens(stripe_mock):
    no_key = httpx.post(f"{stripe_mock.url}/v1/charges", data=CHARGE)
    live_key = httpx.post(f"{stripe_mock.url}/v1/charges", data=CHARGE, headers={"Authorization": "Bearer sk_live_x"})
    assert (no_key.status_code, live_key.status_code) == (401, 401)
    assert live_key.json()["error"]["message"].startswith("Invalid API Key provided")

    # The mock's bonus tokens: a rate limit (not kept under the key, as Stripe does) and a server
    # error (kept: the same key answers it again).
    limited = [charge(stripe_mock, {**CHARGE, "source": "tok_429"}, key="k-429").status_code for _ in range(2)]
    failed = [charge(stripe_mock, {**CHARGE, "source": "tok_500"}, key="k-500") for _ in range(2)]
    assert limited == [429, 429]
    assert [f.status_code for f in failed] == [500, 500]
    assert failed[1].headers.get("idempotent-replayed") == "true"
    assert charges(stripe_mock) == []


def test_the_stripe_mock_stops_on_sigterm(tmp_path):
    with third_party.running_stripe_mock(tmp_path) as server:
        assert httpx.get(f"{server.url}/v1/charges", headers=AUTH).status_code == 200
    assert server.process.returncode == -signal.SIGTERM
