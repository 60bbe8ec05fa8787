import re
import threading

import httpx

from tests.standin.conftest import add_faults, records

BODY = {"reference": "INV-1", "payload": {"amount": 42}}


def test_it_creates_a_record_and_finds_it_by_id(http):
    """POST /records answers 201 with the new record; GET /records/<id> returns the same record."""
    created = http.post("/records", json=BODY)

    assert created.status_code == 201
    record = created.json()
    assert re.fullmatch(r"rec-\d+", record["id"])
    assert record["reference"] == "INV-1"
    assert record["payload"] == {"amount": 42}
    assert record["idempotency_key"] is None
    assert record["created_at"]
    assert created.headers["content-type"] == "application/json"
    assert "idempotent-replayed" not in created.headers

    found = http.get(f"/records/{record['id']}")
    assert found.status_code == 200
    assert found.json() == record


def test_it_answers_404_for_an_unknown_record(http):
    """An unknown id is a JSON 404, as is an unknown path."""
    missing = http.get("/records/rec-999")
    assert missing.status_code == 404
    assert missing.json()["error"] == "not_found"

    assert http.get("/nowhere").json()["error"] == "not_found"


def test_it_creates_a_new_record_for_every_post_without_a_key(http):
    """Without an Idempotency-Key the destination is not idempotent: a retry makes a duplicate."""
    first = http.post("/records", json=BODY).json()
    second = http.post("/records", json=BODY).json()

    assert first["id"] != second["id"]
    assert [r["id"] for r in records(http, reference="INV-1")] == [first["id"], second["id"]]


def test_it_filters_records_by_reference_and_key_together(http):
    """Both filters are ANDed; no filter lists every record; an unknown filter is refused."""
    a = http.post("/records", json=BODY, headers={"Idempotency-Key": "k-a"}).json()
    b = http.post("/records", json=BODY, headers={"Idempotency-Key": "k-b"}).json()
    c = http.post("/records", json={"reference": "INV-2", "payload": {}}, headers={"Idempotency-Key": "k-c"}).json()

    assert records(http) == [a, b, c]
    assert records(http, reference="INV-1") == [a, b]
    assert records(http, idempotency_key="k-b") == [b]
    assert records(http, reference="INV-2", idempotency_key="k-b") == []
    assert records(http, reference="INV-2", idempotency_key="k-c") == [c]

    typo = http.get("/records", params={"ref": "INV-1"})
    assert typo.status_code == 400
    assert typo.json()["error"] == "unknown_filter"


def test_it_replays_the_same_record_for_a_repeated_idempotency_key(http):
    """Same key and same body: 200 with the same record, Idempotent-Replayed: true, nothing new."""
    first = http.post("/records", json=BODY, headers={"Idempotency-Key": "op-1"})
    again = http.post("/records", json=BODY, headers={"Idempotency-Key": "op-1"})

    assert first.status_code == 201
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert http.get("/_stats").json()["records"] == 1


def test_it_refuses_a_reused_key_with_a_different_body(http):
    """Same key, different body: 422 idempotency_key_reused, and the first record is untouched."""
    first = http.post("/records", json=BODY, headers={"Idempotency-Key": "op-1"}).json()
    changed = http.post("/records", json={**BODY, "payload": {"amount": 43}}, headers={"Idempotency-Key": "op-1"})

    assert changed.status_code == 422
    assert changed.json()["error"] == "idempotency_key_reused"
    assert records(http) == [first]


def test_it_creates_one_record_when_the_same_key_arrives_concurrently(standin):
    """The key check and the insert happen under one lock: parallel retries make one record."""
    statuses, ids = [], []
    start = threading.Barrier(16)

    def post(client):
        start.wait(timeout=5)
        response = client.post("/records", json=BODY, headers={"Idempotency-Key": "race"})
        statuses.append(response.status_code)
        ids.append(response.json()["id"])

    # One client, many pooled connections: the requests really arrive in parallel.
    with httpx.Client(base_url=standin, timeout=5, limits=httpx.Limits(max_connections=16)) as client:
        client.post("/_reset").raise_for_status()
        threads = [threading.Thread(target=post, args=(client,)) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
        assert sorted(statuses) == [200] * 15 + [201]
        assert len(set(ids)) == 1
        assert client.get("/_stats").json()["records"] == 1


def test_it_answers_400_for_a_bad_body(http):
    """Bad JSON, a missing or empty reference, or a non-object payload: 400 with error and detail."""
    bad_bodies = [
        b"{not json",
        b"[]",
        b'{"payload": {}}',
        b'{"reference": "", "payload": {}}',
        b'{"reference": 7, "payload": {}}',
        b'{"reference": "INV-1"}',
        b'{"reference": "INV-1", "payload": [1]}',
    ]
    for raw in bad_bodies:
        response = http.post("/records", content=raw, headers={"Content-Type": "application/json"})
        assert response.status_code == 400, raw
        assert response.json()["error"], raw
        assert response.json()["detail"], raw

    assert http.get("/_stats").json()["records"] == 0


def test_it_answers_405_in_json_for_a_wrong_method(http):
    """A known path with the wrong method is a JSON 405, never an HTML page."""
    response = http.delete("/records")
    assert response.status_code == 405
    assert response.json()["error"] == "method_not_allowed"


def test_it_answers_health(http):
    """GET /health is the readiness probe."""
    response = http.get("/health")
    assert response.status_code == 200
    assert response.json() == {"ok": True}


def test_it_counts_requests_by_route(http):
    """GET /_stats counts records and requests per route (the reset that started the test is cleared)."""
    http.post("/records", json=BODY)
    http.post("/records", json=BODY)
    http.get("/records/rec-1")

    assert http.get("/_stats").json() == {
        "records": 2,
        "requests": {"POST /records": 2, "GET /records/<id>": 1, "GET /_stats": 1},
    }


def test_it_clears_everything_on_reset_but_the_id_counter(http):
    """POST /_reset forgets records, keys, pending faults and counters; ids go on (never given twice)."""
    before = http.post("/records", json=BODY, headers={"Idempotency-Key": "op-1"}).json()["id"]
    add_faults(http, {"kind": "reset_before"})

    assert http.post("/_reset").status_code == 200

    assert http.get("/_faults").json() == {"faults": [], "lookup_faults": []}
    assert records(http) == []
    assert http.get("/_stats").json() == {
        "records": 0,
        "requests": {"GET /_faults": 1, "GET /records": 1, "GET /_stats": 1},
    }
    reused = http.post("/records", json={**BODY, "payload": {"other": True}}, headers={"Idempotency-Key": "op-1"})
    assert reused.status_code == 201
    assert int(reused.json()["id"].removeprefix("rec-")) == int(before.removeprefix("rec-")) + 1
