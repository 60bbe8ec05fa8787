"""The management API from the positions of an attacker and of an unlucky user: a token of another
workspace, a person demoted or removed after their token was issued, a revoked token, and hostile
input (odd keys, ids and cursors, text the database cannot hold). Each is refused with its
documented status, never a server error, and leaves nothing written."""

import pytest

from ledger.core import accounts
from ledger.models import ApiToken, AuditEvent, Conflict, Control, Membership, Operation
from tests.api.conftest import Caller
from tests.api.test_decisions import REFUND, conflict_of, refused, send_refund

EVERY_SCOPE = ["events", "claims", "read", "operate", "approve"]


@pytest.fixture
def machine(caller):
    return caller()


def written() -> tuple[int, int, int]:
    return AuditEvent.objects.count(), Operation.objects.count(), Control.objects.count()


# --- another workspace ----------------------------------------------------------------------------


@pytest.fixture
def outsiders(client, person):
    """An admin's token of workspace `other` with every scope, and a machine's of it."""
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    boss = person("other-admin", "admin", workspaces=("other",))
    as_admin = accounts.issue_token(workspace=other, name="x", actor="test", user=boss, scopes=EVERY_SCOPE)
    as_machine = accounts.issue_token(workspace=other, name="y", actor="test", scopes=EVERY_SCOPE[:4])
    return [Caller(client, as_admin), Caller(client, as_machine)]


DECISIONS = [
    ("approve", "fingerprint"),
    ("reject", "fingerprint"),
    ("replay", {"reason": "x"}),
    ("resolve", {"external_id": "rec_1", "note": "seen"}),
    ("cancel", {"reason": "x"}),
    ("take", {}),
    ("release", None),
]


def test_nothing_of_another_workspace_is_read_or_acted_on_by_its_key_or_id(machine, outsiders):
    refund = send_refund(machine)
    conflict = conflict_of(machine)
    pause = machine.post("/api/v1/pauses", {"scope": "workspace", "reason": "incident"}).json()["pauses"][0]["id"]
    before = written()

    for outsider in outsiders:
        assert outsider.get(f"/api/v1/operations/{refund.key}").status_code == 404
        for verb, body in DECISIONS:
            if body == "fingerprint":
                body = {"fingerprint": refund.fingerprint, "reason": "x"}
            answer = outsider.post(f"/api/v1/operations/{refund.key}/{verb}", body)
            # A machine's token is refused approving and taking before anything is looked up.
            assert answer.status_code in (403, 404), (verb, answer.content)
            if answer.status_code == 403:
                assert answer.json()["reason"] in ("missing_scope", "person_only")
        for verb in ("apply", "dismiss"):
            assert outsider.post(f"/api/v1/conflicts/{conflict}/{verb}", {"reason": "x"}).status_code == 404
        assert outsider.delete(f"/api/v1/pauses/{pause}").status_code == 404
        assert outsider.get("/api/v1/pauses").json()["pauses"] == []
        assert outsider.get("/api/v1/operations", state="any").json()["operations"] == []
        assert outsider.get("/api/v1/claims/due").json()["operations"] == []

    assert written() == before
    assert Conflict.objects.get(pk=conflict).status == "open"
    assert Operation.objects.get(pk=refund.pk).state == "pending_approval"


# --- the person behind a token changes -------------------------------------------------------------


def test_a_demotion_counts_from_the_next_request_in_what_is_shown_and_what_is_allowed(caller, person, machine):
    ann = person("ann", "approver")
    as_ann = caller("ann")
    refund = send_refund(machine)
    assert as_ann.get(f"/api/v1/operations/{refund.key}").json()["payload"] == REFUND

    Membership.objects.filter(user=ann).update(role="viewer")

    assert as_ann.get(f"/api/v1/operations/{refund.key}").json()["payload"]["customer_id"] == "••••"
    assert as_ann.get("/api/v1/operations", state="any").json()["operations"][0]["payload"]["amount_cents"] == "••••"
    before = written()
    refused(as_ann.post(f"/api/v1/operations/{refund.key}/approve", {"fingerprint": refund.fingerprint}), 403, "role")
    refused(as_ann.post("/api/v1/pauses", {"scope": "workspace", "reason": "x"}), 403, "role")
    assert written() == before


def test_a_person_removed_from_the_workspace_or_deactivated_is_unauthorized(caller, person, machine):
    ann, bob = person("ann", "admin"), person("bob", "admin")
    as_ann, as_bob = caller("ann"), caller("bob")
    refund = send_refund(machine)

    Membership.objects.filter(user=ann).delete()  # by code that revoked nothing
    bob.is_active = False
    bob.save(update_fields=["is_active"])

    for removed in (as_ann, as_bob):
        assert removed.get(f"/api/v1/operations/{refund.key}").status_code == 401
        approving = removed.post(f"/api/v1/operations/{refund.key}/approve", {"fingerprint": refund.fingerprint})
        assert approving.status_code == 401
    assert Operation.objects.get(pk=refund.pk).state == "pending_approval"


def test_a_revoked_token_is_unauthorized_on_every_management_route(caller, person, machine, workspace):
    person("ann", "admin")
    as_ann = caller("ann")
    refund = send_refund(machine)
    accounts.revoke_token(workspace=workspace, hint=ApiToken.objects.get(user__username="ann").hint, actor="test")
    before = written()

    assert as_ann.get(f"/api/v1/operations/{refund.key}").status_code == 401
    assert as_ann.get("/api/v1/operations").status_code == 401
    assert as_ann.get("/api/v1/pauses").status_code == 401
    assert (
        as_ann.post(f"/api/v1/operations/{refund.key}/approve", {"fingerprint": refund.fingerprint}).status_code == 401
    )
    assert as_ann.post("/api/v1/pauses", {"scope": "workspace", "reason": "x"}).status_code == 401
    assert written() == before


# --- hostile input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        {"limit": 10**30},
        {"cursor": "x" * 100},
        {"cursor": "\x00"},
        {"cursor": "9999-12-31T23:59:59.999999Z_999999999999999999999"},
        {"cursor": "0001-01-01T00:00:00Z_-1"},
        {"state": "any", "cursor": "99999999999999999999999"},
        {"q": "%"},
        {"q": "_"},
        {"q": "\x00"},
    ],
)
def test_the_list_answers_a_hostile_query_without_a_server_error(machine, query):
    assert machine.get("/api/v1/operations", **query).status_code in (200, 422)


@pytest.mark.parametrize(
    "query",
    [
        {"limit": "²"},
        {"limit": "1e2"},
        {"cursor": "====="},
        {"cursor": "\x00"},
        # base64 of "2026-12-05T08:00:00+00:00|1234567890123456789": a position past any id
        {"cursor": "MjAyNi0xMi0wNVQwODowMDowMCswMDowMHwxMjM0NTY3ODkwMTIzNDU2Nzg5"},
        {"action": "\x00"},
    ],
)
def test_the_due_list_answers_a_hostile_query_without_a_server_error(machine, query):
    assert machine.get("/api/v1/claims/due", **query).status_code in (200, 422)


@pytest.mark.parametrize("key", ["%00", "..", "a" * 5000, "%ED%A0%80", "demo:%C0%AF"])
def test_a_key_no_operation_can_have_is_404(machine, key):
    assert machine.get(f"/api/v1/operations/{key}").status_code == 404
    assert machine.post(f"/api/v1/operations/{key}/cancel", {"reason": "x"}).status_code == 404


@pytest.mark.parametrize("bad", ["x\\u0000y", "x\\ud800y"])
def test_text_the_database_cannot_hold_is_refused_422_before_anything_is_written(caller, person, machine, bad):
    person("boss", "admin")
    boss = caller("boss")
    refund = send_refund(machine)
    conflict = conflict_of(machine)
    before = written()
    bodies = [
        (f"/api/v1/operations/{refund.key}/approve", f'{{"fingerprint": "{refund.fingerprint}", "reason": "{bad}"}}'),
        (f"/api/v1/operations/{refund.key}/reject", f'{{"fingerprint": "{refund.fingerprint}", "reason": "{bad}"}}'),
        (f"/api/v1/operations/{refund.key}/approve", f'{{"fingerprint": "{bad}"}}'),
        (f"/api/v1/operations/{refund.key}/cancel", f'{{"reason": "{bad}"}}'),
        (f"/api/v1/operations/{refund.key}/resolve", f'{{"external_id": "{bad}", "note": "n"}}'),
        (f"/api/v1/operations/{refund.key}/resolve", f'{{"external_id": "e", "note": "{bad}"}}'),
        (f"/api/v1/conflicts/{conflict}/dismiss", f'{{"reason": "{bad}"}}'),
        ("/api/v1/pauses", f'{{"scope": "workspace", "reason": "{bad}"}}'),
        ("/api/v1/pauses", f'{{"scope": "action", "action": "{bad}", "reason": "r"}}'),
    ]
    for path, body in bodies:
        assert boss.post(path, body).status_code == 422, (path, body)
    assert written() == before


# --- searching as an oracle -----------------------------------------------------------------------


def test_a_sensitive_request_id_cannot_be_guessed_a_letter_at_a_time_by_searching(caller, person, standin):
    """``q`` matches part of a request id: where the request id is sensitive, a token that sees it
    masked would learn it by searching its parts. Only the key (where it is a keyed hash) matches."""
    from tests import configured as integrations

    integrations.apply_send_invoice(standin.url, sensitive_fields=["request_id"], summary="invoice in {currency}")
    machine = caller()
    data = {
        "request_id": "ann.secret@example.com",
        "version": 1,
        "customer_id": "C-1",
        "amount_cents": 5,
        "currency": "EUR",
    }
    assert machine.post("/api/v1/events", {"action": "send-invoice", "data": data}).status_code == 201
    person("ann", "approver")
    operation = Operation.objects.get(action="send-invoice")

    def found(token, q):
        return [item["key"] for item in token.get("/api/v1/operations", state="any", q=q).json()["operations"]]

    assert "ann.secret" not in operation.key
    assert found(machine, "ann.sec") == []
    assert found(caller("ann"), "ann.sec") == []
    assert found(machine, operation.key[:12]) == [operation.key]


# --- the fingerprint as an oracle -----------------------------------------------------------------


def guessed_amount(shown: str, customer_id: str) -> int | None:
    """What a reader shown the refund masked finds by hashing guesses against its fingerprint (an
    unkeyed SHA-256 of the payload's fields), as anyone can: ``ledger.keys.fingerprint``."""
    from ledger.keys import fingerprint

    known = {"request_id": "R-7", "version": 1, "currency": "EUR", "customer_id": customer_id}
    fields = ("request_id", "version", "customer_id", "amount_cents", "currency")
    return next(
        (cents for cents in range(10_000) if fingerprint(known | {"amount_cents": cents}, fields) == shown), None
    )


def test_the_fingerprint_does_not_give_away_a_masked_value_to_a_reader_who_sees_it_masked(caller, person, machine):
    refund = send_refund(machine)
    assert guessed_amount(refund.fingerprint, "C-1001") == 4500  # what the hash gives away
    person("ann", "approver")
    person("bob", "approver")
    approving = caller("ann").post(f"/api/v1/operations/{refund.key}/approve", {"fingerprint": refund.fingerprint})
    assert approving.status_code == 200, approving.content

    listed = machine.get("/api/v1/operations", state="any").json()["operations"][0]
    page = machine.get(f"/api/v1/operations/{refund.key}").json()

    assert listed["payload"]["amount_cents"] == "••••"
    for shown in (listed["fingerprint"], page["fingerprint"], page["decisions"][0]["fingerprint"]):
        assert guessed_amount(shown, "C-1001") is None
    assert all(refund.fingerprint not in event["message"] for event in page["audit"])
    # Whoever sees the values (and decides on them) reads it whole.
    as_bob = caller("bob").get(f"/api/v1/operations/{refund.key}").json()
    assert as_bob["fingerprint"] == as_bob["decisions"][0]["fingerprint"] == refund.fingerprint
    assert any(refund.fingerprint in event["message"] for event in as_bob["audit"])
