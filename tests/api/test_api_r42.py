"""The seed's R-42 story over HTTP (the first acceptance case)."""

from ledger.engine.processing import process_due_operations
from ledger.models import Conflict, Delivery, Operation, ReviewDraft
from tests.conftest import event


def test_it_tells_accepted_duplicate_conflict_and_new_version_apart(api):
    first = api.post("/api/v1/events", event("delivery-1"))
    again = api.post("/api/v1/events", event("delivery-2"))
    changed = api.post("/api/v1/events", event("delivery-3", title="Changed without a new version"))
    version_4 = api.post("/api/v1/events", event("delivery-4", version=4))

    assert first.status_code == 201, first.json()
    assert first.json()["status"] == "accepted"
    assert first.json()["key"] == "demo:R-42:v3:prepare-brief"
    assert again.status_code == 200
    assert again.json()["status"] == "duplicate"
    assert again.json()["operation"]["id"] == first.json()["operation"]["id"]
    assert changed.status_code == 409
    assert changed.json()["reason"] == "payload_conflict"
    assert changed.json()["key"] == "demo:R-42:v3:prepare-brief"
    assert version_4.status_code == 201
    assert version_4.json()["key"] == "demo:R-42:v4:prepare-brief"

    assert Operation.objects.count() == 2
    assert Delivery.objects.count() == 4
    conflict = Conflict.objects.get(pk=changed.json()["conflict_id"])
    assert conflict.differences == [
        {"field": "title", "recorded": "Review renewal options", "incoming": "Changed without a new version"}
    ]

    assert process_due_operations() == 2
    assert ReviewDraft.objects.count() == 2
    assert set(Operation.objects.values_list("state", flat=True)) == {"succeeded"}


def test_it_returns_the_recorded_result_for_a_duplicate_after_processing(api):
    api.post("/api/v1/events", event("delivery-1"))
    process_due_operations()
    again = api.post("/api/v1/events", event("delivery-9"))
    body = again.json()
    assert body["status"] == "duplicate"
    assert body["operation"]["state"] == "succeeded"
    draft = ReviewDraft.objects.get()
    assert body["operation"]["result"] == {
        "draft_id": f"draft-{draft.pk}",
        "title": "Review renewal options",
        "owner": "ops",
        "state": "awaiting_review",
    }
    assert ReviewDraft.objects.count() == 1
