"""Faults with "on": "lookup": they fail the next GET /records, on a queue of their own."""

import httpx
import pytest

from tests.conftest import Standin
from tests.standin.conftest import add_faults, add_lookup_faults, records

BODY = {"reference": "INV-1", "payload": {"amount": 42}}
KEY = {"Idempotency-Key": "op-1"}
NO_FAULTS = {"faults": [], "lookup_faults": []}


def pending(http):
    return http.get("/_faults").json()


def test_it_answers_an_injected_status_to_a_lookup_then_the_records(http):
    """A lookup status fault answers that status once (Retry-After when given); the next lookup answers
    normally and finds the record, which the fault never touched."""
    created = http.post("/records", json=BODY, headers=KEY).json()
    assert add_lookup_faults(http, {"kind": "status", "status": 503, "retry_after": 2}) == [
        {"kind": "status", "status": 503, "retry_after": 2}
    ]

    failed = http.get("/records", params={"reference": "INV-1"})

    assert failed.status_code == 503
    assert failed.headers["Retry-After"] == "2"
    assert failed.json()["error"] == "injected_fault"
    assert pending(http) == NO_FAULTS
    assert records(http, reference="INV-1") == [created]


def test_it_hangs_up_on_a_lookup_on_reset_before(http):
    """reset_before on a lookup closes the connection unanswered; the next lookup answers."""
    created = http.post("/records", json=BODY).json()
    add_lookup_faults(http, {"kind": "reset_before"})

    with pytest.raises(httpx.RemoteProtocolError):
        http.get("/records", params={"reference": "INV-1"})

    assert records(http, reference="INV-1") == [created]


def test_it_answers_a_lookup_late_on_delay(http):
    """delay holds the lookup's answer: a client with a short timeout gives up; one that waits gets it."""
    created = http.post("/records", json=BODY).json()
    add_lookup_faults(http, {"kind": "delay", "seconds": 30}, {"kind": "delay", "seconds": 0.05})

    with pytest.raises(httpx.ReadTimeout):
        http.get("/records", params={"reference": "INV-1"}, timeout=0.2)

    assert records(http, reference="INV-1") == [created]
    assert pending(http) == NO_FAULTS


def test_it_consumes_lookup_faults_in_order_one_per_lookup(http):
    """Lookup faults form their own FIFO queue, one per GET /records, whatever its filters."""
    add_lookup_faults(http, {"kind": "status", "status": 503})
    assert [f["status"] for f in add_lookup_faults(http, {"kind": "status", "status": 429})] == [503, 429]

    assert http.get("/records", params={"reference": "nope"}).status_code == 503
    assert pending(http) == {"faults": [], "lookup_faults": [{"kind": "status", "status": 429}]}
    assert http.get("/records", params={"bogus": "x"}).status_code == 429
    assert http.get("/records").status_code == 200


def test_a_lookup_fault_does_not_affect_a_create(http):
    """POST /records never consumes a lookup fault; the lookup that follows does."""
    add_lookup_faults(http, {"kind": "status", "status": 503})

    created = http.post("/records", json=BODY, headers=KEY)

    assert created.status_code == 201
    assert pending(http) == {"faults": [], "lookup_faults": [{"kind": "status", "status": 503}]}
    assert http.get("/records", params={"idempotency_key": "op-1"}).status_code == 503
    assert records(http, idempotency_key="op-1") == [created.json()]


def test_a_create_fault_does_not_affect_a_lookup(http):
    """GET /records never consumes a create fault; the create that follows does."""
    add_faults(http, {"kind": "status", "status": 503})

    assert records(http) == []

    assert pending(http) == {"faults": [{"kind": "status", "status": 503}], "lookup_faults": []}
    assert http.post("/records", json=BODY).status_code == 503
    assert http.post("/records", json=BODY).status_code == 201


def test_it_splits_one_list_between_the_two_queues(http):
    """One POST /_faults may mix targets; each fault goes to its queue, in order; "on": "create" is the default."""
    response = http.post(
        "/_faults",
        json={
            "faults": [
                {"kind": "status", "status": 503},
                {"kind": "status", "status": 500, "on": "lookup"},
                {"kind": "drop_after_commit", "on": "create"},
                {"kind": "reset_before", "on": "lookup"},
            ]
        },
    )

    assert response.status_code == 200, response.text
    assert (
        response.json()
        == pending(http)
        == {
            "faults": [{"kind": "status", "status": 503}, {"kind": "drop_after_commit"}],
            "lookup_faults": [{"kind": "status", "status": 500}, {"kind": "reset_before"}],
        }
    )


def test_a_lookup_of_one_record_by_id_does_not_consume_a_lookup_fault(http):
    """Only GET /records (the search reconciliation uses) feels lookup faults; GET /records/<id> does not."""
    created = http.post("/records", json=BODY).json()
    add_lookup_faults(http, {"kind": "reset_before"})

    assert http.get(f"/records/{created['id']}").json() == created
    assert pending(http)["lookup_faults"] == [{"kind": "reset_before"}]


@pytest.mark.parametrize(
    "fault",
    [
        {"kind": "reset_before", "on": "delete"},
        {"kind": "reset_before", "on": "LOOKUP"},
        {"kind": "reset_before", "on": None},
        {"kind": "reset_before", "on": ["lookup"]},
        {"kind": "drop_after_commit", "on": "lookup"},
        {"kind": "status", "status": 200, "on": "lookup"},
        {"kind": "delay", "on": "lookup"},
        {"kind": "explode", "on": "lookup"},
    ],
)
def test_it_refuses_a_bad_fault_and_queues_none_of_the_list(http, fault):
    """A bad target, a drop_after_commit on a lookup or a bad lookup fault is a 400 that queues nothing
    from the list, on either queue."""
    response = http.post(
        "/_faults",
        json={
            "faults": [
                {"kind": "reset_before"},
                {"kind": "reset_before", "on": "lookup"},
                fault,
            ]
        },
    )

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_fault"
    assert pending(http) == NO_FAULTS


def test_it_says_why_it_refuses_a_target_or_drop_after_commit_on_a_lookup(http):
    """The refusals name the problem."""
    bad_target = http.post("/_faults", json={"faults": [{"kind": "reset_before", "on": "read"}]})
    drop = http.post("/_faults", json={"faults": [{"kind": "drop_after_commit", "on": "lookup"}]})

    assert "'on' must be one of" in bad_target.json()["detail"]
    assert "'read'" in bad_target.json()["detail"]
    assert "drop_after_commit cannot apply to a lookup" in drop.json()["detail"]


def test_reset_clears_lookup_faults(http):
    """POST /_reset empties both queues."""
    add_faults(http, {"kind": "status", "status": 503})
    add_lookup_faults(http, {"kind": "status", "status": 503}, {"kind": "reset_before"})

    assert http.post("/_reset").status_code == 200

    assert pending(http) == NO_FAULTS
    assert http.get("/records").status_code == 200


def test_it_counts_faulted_lookups(http):
    """Every GET /records is counted, whether a fault answered it, hung up on it, or it answered normally."""
    add_lookup_faults(http, {"kind": "status", "status": 503}, {"kind": "reset_before"})

    assert http.get("/records").status_code == 503
    with pytest.raises(httpx.RemoteProtocolError):
        http.get("/records")
    assert http.get("/records").status_code == 200

    assert http.get("/_stats").json()["requests"] == {"POST /_faults": 1, "GET /records": 3, "GET /_stats": 1}


def test_the_test_helper_queues_lookup_faults(standin):
    """Standin.fail_next_lookup (tests/conftest.py) queues its faults for the next lookups only."""
    destination = Standin(standin)
    try:
        destination.http.post("/_reset").raise_for_status()
        destination.fail_next_lookup({"kind": "status", "status": 503}, {"kind": "reset_before"})

        assert destination.create("INV-1")["reference"] == "INV-1"
        assert destination.http.get("/records").status_code == 503
        with pytest.raises(httpx.RemoteProtocolError):
            destination.records()
        assert [r["reference"] for r in destination.records()] == ["INV-1"]
        assert destination.requests("GET /records") == 3
        assert destination.requests("POST /records") == 1
    finally:
        destination.http.close()
