"""Reading operations over the API: the queue's list with its filters, page after page by cursor,
masked for the token's role as the console masks them; and one operation's page with its tries
(and what the destination said), deliveries, conflicts, decisions and audit trail."""

import pytest

from ledger.engine.processing import process_due_operations
from ledger.models import Operation
from tests.conftest import event, external_event

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


@pytest.fixture
def machine(caller):
    return caller()


def keys(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [operation["key"] for operation in response.json()["operations"]]


def test_it_lists_what_needs_attention_newest_change_first(machine, standin):
    standin.fail_next({"kind": "status", "status": 422})
    machine.post("/api/v1/events", external_event(request_id="N-1"))
    process_due_operations()
    machine.post("/api/v1/events", event("d-1", request_id="B-1"))  # pending: no attention needed
    machine.post("/api/v1/events", {"action": "issue-refund", "data": REFUND})

    listed = keys(machine.get("/api/v1/operations"))

    refund = Operation.objects.get(action="issue-refund")
    notice = Operation.objects.get(action="send-notice")
    assert notice.state == "needs_review"
    assert listed == [refund.key, notice.key]
    assert keys(machine.get("/api/v1/operations", state="needs_review")) == [notice.key]
    assert len(keys(machine.get("/api/v1/operations", state="any"))) == 3
    assert keys(machine.get("/api/v1/operations", state="pending")) == [
        Operation.objects.get(action="prepare-brief").key
    ]


def test_it_filters_by_action_destination_age_and_key(machine):
    machine.post("/api/v1/events", event("d-1", request_id="B-1"))
    machine.post("/api/v1/events", {"action": "issue-refund", "data": REFUND})
    refund = Operation.objects.get(action="issue-refund")

    assert keys(machine.get("/api/v1/operations", state="any", action="issue-refund")) == [refund.key]
    assert keys(machine.get("/api/v1/operations", state="any", q="B-1")) == [
        Operation.objects.get(action="prepare-brief").key
    ]
    brief = Operation.objects.get(action="prepare-brief")
    assert keys(machine.get("/api/v1/operations", state="any", destination="prepare-brief")) == [brief.key]
    assert keys(machine.get("/api/v1/operations", state="any", age="1h")) == []


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"state": "sleeping"}, "state"),
        ({"action": "no-such-action"}, "action"),
        ({"destination": "nowhere"}, "destination"),
        ({"age": "2h"}, "age"),
        ({"limit": "0"}, "limit"),
        ({"limit": "101"}, "limit"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"q": "R\x00"}, "q"),
        ({"status": "needs_review"}, "status"),
    ],
)
def test_it_refuses_a_filter_it_cannot_take_422_naming_it(machine, query, field):
    response = machine.get("/api/v1/operations", **query)

    assert response.status_code == 422, response.content
    body = response.json()
    assert (body["status"], body["reason"]) == ("refused", "invalid_input")
    assert [error["field"] for error in body["errors"]] == [field]


def test_it_pages_by_cursor_without_repeating_or_skipping(machine):
    for n in range(5):
        machine.post("/api/v1/events", event(f"d-{n}", request_id=f"B-{n}"))

    seen, cursor = [], None
    for _ in range(5):
        page = machine.get("/api/v1/operations", state="any", limit=2, **({"cursor": cursor} if cursor else {})).json()
        seen += [operation["key"] for operation in page["operations"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break

    assert seen == list(Operation.objects.order_by("-id").values_list("key", flat=True))


def test_it_pages_the_queue_by_its_order_of_change(machine):
    for n in range(3):
        machine.post("/api/v1/events", {"action": "issue-refund", "data": REFUND | {"request_id": f"R-{n}"}})

    first = machine.get("/api/v1/operations", limit=2).json()
    rest = machine.get("/api/v1/operations", limit=2, cursor=first["next_cursor"]).json()

    listed = [operation["key"] for operation in first["operations"] + rest["operations"]]
    assert listed == list(Operation.objects.order_by("-updated_at", "-id").values_list("key", flat=True))
    assert rest["next_cursor"] is None


def test_it_masks_sensitive_values_for_a_machine_and_shows_them_to_an_approver(machine, caller, approver):
    machine.post("/api/v1/events", {"action": "issue-refund", "data": REFUND})

    masked = machine.get("/api/v1/operations").json()["operations"][0]["payload"]
    shown = caller("approver").get("/api/v1/operations").json()["operations"][0]["payload"]

    assert (masked["customer_id"], masked["amount_cents"]) == ("••••", "••••")
    assert (shown["customer_id"], shown["amount_cents"]) == ("C-1001", 4500)


def test_it_lists_only_the_tokens_workspace(machine, client):
    from ledger.core import accounts

    _, other_token = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    client.post("/api/v1/events", event(), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {other_token}")

    assert keys(machine.get("/api/v1/operations", state="any")) == []


# --- one operation's page -------------------------------------------------------------------------


def test_the_page_shows_each_try_with_what_the_destination_said_deliveries_and_audit(machine, standin):
    standin.fail_next({"kind": "status", "status": 422})
    machine.post("/api/v1/events", external_event(request_id="N-1"))
    process_due_operations()
    operation = Operation.objects.get()

    page = machine.get(f"/api/v1/operations/{operation.key}").json()

    assert page["fingerprint"] == operation.fingerprint
    (attempt,) = page["tries"]
    assert (attempt["number"], attempt["outcome"], attempt["http_status"]) == (1, "permanent", 422)
    assert attempt["said"] is not None
    assert attempt["said"]["in_full"] is False
    assert [(d["source"], d["outcome"]) for d in page["deliveries"]] == [("api", "accepted")]
    kinds = [entry["kind"] for entry in page["audit"]]
    assert kinds[0] == "reserved"
    assert "needs_review" in [entry["to_state"] for entry in page["audit"]]


def test_the_page_shows_conflicts_masked_and_decisions(machine, caller, approver):
    machine.post("/api/v1/events", {"action": "issue-refund", "data": REFUND})
    machine.post("/api/v1/events", {"action": "issue-refund", "data": REFUND | {"amount_cents": 9900}})
    operation = Operation.objects.get()

    as_machine = machine.get(f"/api/v1/operations/{operation.key}").json()
    as_approver = caller("approver").get(f"/api/v1/operations/{operation.key}").json()

    (conflict,) = as_machine["conflicts"]
    assert conflict["status"] == "open"
    assert conflict["differences"][0]["field"] == "amount_cents"
    assert 9900 not in (conflict["differences"][0]["recorded"], conflict["differences"][0]["incoming"])
    assert as_approver["conflicts"][0]["differences"][0]["incoming"] == 9900
    assert as_machine["decisions"] == []


def test_the_page_and_the_decisions_under_it_each_get_their_own_requests(machine, caller, approver):
    """A key may hold slashes, so the page's route would match `{key}/approve` too: the decisions
    are routed first. (A key ends with its action's name, which holds no slash: no key is taken for
    a decision.)"""
    machine.post("/api/v1/events", {"action": "issue-refund", "data": REFUND})
    operation = Operation.objects.get()

    page = caller("approver").get(f"/api/v1/operations/{operation.key}")
    approved = caller("approver").post(
        f"/api/v1/operations/{operation.key}/approve", {"fingerprint": operation.fingerprint}
    )

    assert page.status_code == 200
    assert approved.status_code == 200, approved.content
    assert machine.get(f"/api/v1/operations/{operation.key}/approve").status_code == 405
