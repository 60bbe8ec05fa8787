"""The listing the reconciliation audit reads: the records created in a window, oldest first, a
page at a time; and the test controls that change a record behind the ledger's back."""

from datetime import UTC, datetime, timedelta

import time_machine

from tests.standin.conftest import add_lookup_faults

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def create_at(http, when, reference):
    with time_machine.travel(when, tick=False):
        return http.post("/records", json={"reference": reference, "payload": {"n": reference}}).json()


def listing(http, after, before, **params):
    response = http.get(
        "/records", params={"created_after": after.isoformat(), "created_before": before.isoformat(), **params}
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_it_lists_the_records_created_in_a_half_open_window_oldest_first(http):
    before = create_at(http, T0 - timedelta(seconds=1), "early")
    first = create_at(http, T0, "first")
    second = create_at(http, T0 + timedelta(minutes=5), "second")
    create_at(http, T0 + timedelta(hours=1), "at-the-end")

    page = listing(http, T0, T0 + timedelta(hours=1))

    assert [r["id"] for r in page["records"]] == [first["id"], second["id"]]
    assert page["next_cursor"] is None
    assert before["id"] not in {r["id"] for r in page["records"]}


def test_it_pages_with_a_cursor_until_the_last_page(http):
    made = [create_at(http, T0 + timedelta(seconds=i), f"r{i}")["id"] for i in range(5)]

    seen, cursor, pages = [], None, 0
    while True:
        page = listing(http, T0, T0 + timedelta(hours=1), page_size=2, **({"cursor": cursor} if cursor else {}))
        seen += [r["id"] for r in page["records"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break

    assert (seen, pages) == (made, 3)


def test_it_refuses_a_listing_it_cannot_read(http):
    """Every bad listing is a JSON 400 that says what is wrong."""
    now = T0.isoformat()
    cases = [
        ({"created_after": now}, "needs both"),
        ({"created_after": "yesterday", "created_before": now}, "not an ISO 8601 time"),
        ({"created_after": "2030-01-01T12:00:00", "created_before": now}, "needs a UTC offset"),
        ({"created_after": now, "created_before": now, "page_size": "0"}, "between 1 and 500"),
        ({"created_after": now, "created_before": now, "page_size": "501"}, "between 1 and 500"),
        ({"created_after": now, "created_before": now, "cursor": "-1"}, "whole number"),
        ({"created_after": now, "created_before": now, "reference": "x"}, "a listing takes"),
    ]
    for params, detail in cases:
        response = http.get("/records", params=params)
        assert response.status_code == 400, params
        assert detail in response.json()["detail"], (params, response.json())


def test_lookup_faults_apply_to_a_listing(http):
    add_lookup_faults(http, {"kind": "status", "status": 503})

    response = http.get("/records", params={"created_after": T0.isoformat(), "created_before": T0.isoformat()})

    assert response.status_code == 503


def test_a_deleted_record_is_gone_with_its_idempotency_key(http):
    body = {"reference": "K-1", "payload": {"n": 1}}
    record = http.post("/records", json=body, headers={"Idempotency-Key": "K-1"}).json()

    assert http.post("/_delete", json={"id": record["id"]}).status_code == 200

    assert http.get(f"/records/{record['id']}").status_code == 404
    again = http.post("/records", json=body, headers={"Idempotency-Key": "K-1"})
    assert again.status_code == 201
    assert again.json()["id"] != record["id"]
    assert http.post("/_delete", json={"id": record["id"]}).status_code == 404


def test_an_edited_record_holds_the_new_payload(http):
    record = http.post("/records", json={"reference": "E-1", "payload": {"n": 1}}).json()

    edited = http.post("/_edit", json={"id": record["id"], "payload": {"n": 2}})

    assert edited.status_code == 200
    assert http.get(f"/records/{record['id']}").json()["payload"] == {"n": 2}
    assert http.post("/_edit", json={"id": "rec-99", "payload": {}}).status_code == 404
    assert http.post("/_edit", json={"id": record["id"], "payload": []}).status_code == 400
