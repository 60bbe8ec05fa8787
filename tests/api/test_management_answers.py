"""Every answer the OpenAPI document lists for the management routes (tagged decisions, pauses,
operations; docs/api-for-flows.md) is a body its schema accepts: for each status of each route, a
real request through the Django test client that gets that status, its body checked against the
published JSON schema of that status. tests/api/test_answers.py does the same for the other routes."""

import json

import pytest
from django.contrib.auth import get_user_model

from ledger.core import accounts
from ledger.engine.processing import process_due_operations
from ledger.models import Operation, Workspace
from ledger.people.pause import set_paused
from tests.api.conftest import EVERY_SCOPE
from tests.api.test_answers import (
    DOCUMENT,
    MANAGEMENT_TAGS,
    Case,
    answers_as_published,
    bad_gzip,
    brotli,
    database_down,  # noqa: F401  (a fixture the 503s need)
    latin_1,
    malformed_json,
    no_token,
    not_json,
    too_large,
    unreachable,
)
from tests.conftest import event, external_event

pytestmark = pytest.mark.django_db

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


class Sender:
    """The test client with a token of the workspace's admin holding every scope (``as_`` another)."""

    def __init__(self, client, token: str):
        self.client, self.token = client, token

    def as_(self, username: str | None = None, role: str = "admin", scopes=None) -> "Sender":
        user = None
        if username:
            user = get_user_model().objects.create_user(username=username, password="pw")
            from ledger.models import Membership

            Membership.objects.create(user=user, workspace=Workspace.objects.get(slug="demo"), role=role)
        scopes = scopes or (EVERY_SCOPE if user else EVERY_SCOPE[:4])
        workspace = Workspace.objects.get(slug="demo")
        return Sender(
            self.client, accounts.issue_token(workspace=workspace, name="t", actor="t", user=user, scopes=scopes)
        )

    def _auth(self, authorized: bool) -> dict:
        return {"HTTP_AUTHORIZATION": f"Bearer {self.token}"} if authorized else {}

    def post(self, path: str, body=None, content_type: str = "application/json", authorized: bool = True, **headers):
        if body is None:
            return self.client.generic("POST", path, **self._auth(authorized), **headers)
        data = body if isinstance(body, str | bytes) else json.dumps(body)
        return self.client.post(path, data, content_type=content_type, **self._auth(authorized), **headers)

    def get(self, path: str, authorized: bool = True, **query):
        return self.client.get(path, query, **self._auth(authorized))

    def delete(self, path: str, authorized: bool = True):
        return self.client.delete(path, **self._auth(authorized))


# --- what the requests act on ---------------------------------------------------------------------


def refund(send: Sender, request_id: str = "R-7") -> Operation:
    send.as_().post("/api/v1/events", {"action": "issue-refund", "data": REFUND | {"request_id": request_id}})
    return Operation.objects.get(payload__request_id=request_id)


def brief(send: Sender, request_id: str = "B-1") -> Operation:
    send.as_().post("/api/v1/events", event(request_id=request_id))
    return Operation.objects.get(payload__request_id=request_id)


def conflict_id(send: Sender) -> int:
    operation = brief(send)
    answer = send.as_().post("/api/v1/events", event("d-2", request_id="B-1", title="Another"))
    assert answer.status_code == 409
    return operation.conflicts.get().pk


def op(operation: Operation, verb: str) -> str:
    return f"/api/v1/operations/{operation.key}/{verb}"


# --- one request per documented status ------------------------------------------------------------

# (route, a valid body for it); the key in the path is found by each request.
DECISIONS = {
    "approve": {"fingerprint": "f", "reason": "ok"},
    "reject": {"fingerprint": "f", "reason": "no"},
    "replay": {"reason": "again"},
    "resolve": {"external_id": "rec_1", "note": "seen"},
    "cancel": {"reason": "not wanted"},
    "take": {"take_over": False},
}


def decided(verb: str, operation: Operation) -> dict:
    body = dict(DECISIONS[verb])
    if "fingerprint" in body:
        body["fingerprint"] = operation.fingerprint
    return body


def approve_ok(send):
    operation = refund(send)
    return send.post(op(operation, "approve"), decided("approve", operation))


def reject_ok(send):
    operation = refund(send)
    return send.post(op(operation, "reject"), decided("reject", operation))


def replay_ok(send, standin):
    standin.fail_next({"kind": "status", "status": 422})
    send.as_().post("/api/v1/events", external_event())
    process_due_operations()
    return send.post(op(Operation.objects.get(), "replay"), DECISIONS["replay"])


replay_ok.needs = "standin"


def resolve_ok(send, unknown_notice):
    return send.post(op(unknown_notice, "resolve"), DECISIONS["resolve"])


resolve_ok.needs = "unknown_notice"


def cancel_ok(send):
    return send.post(op(brief(send), "cancel"), DECISIONS["cancel"])


def take_ok(send):
    return send.post(op(brief(send), "take"), DECISIONS["take"])


def release_ok(send):
    operation = brief(send)
    send.post(op(operation, "take"))
    return send.post(op(operation, "release"))


def apply_ok(send):
    return send.post(f"/api/v1/conflicts/{conflict_id(send)}/apply", {"reason": "meant"})


def dismiss_ok(send):
    return send.post(f"/api/v1/conflicts/{conflict_id(send)}/dismiss", {"reason": "mistake"})


def stale_fingerprint(send):
    return send.post(op(refund(send), "approve"), {"fingerprint": "0" * 64})


def reject_wrong_state(send):
    operation = brief(send)
    return send.post(op(operation, "reject"), decided("reject", operation))


def replay_wrong_state(send):
    return send.post(op(brief(send), "replay"), DECISIONS["replay"])


def resolve_wrong_state(send):
    return send.post(op(brief(send), "resolve"), DECISIONS["resolve"])


def cancel_twice(send):
    operation = brief(send)
    send.post(op(operation, "cancel"), DECISIONS["cancel"])
    return send.post(op(operation, "cancel"), DECISIONS["cancel"])


def take_held_by_someone_else(send):
    operation = brief(send)
    send.as_("other", "operator").post(op(operation, "take"))
    return send.post(op(operation, "take"))


def apply_decided(send):
    pk = conflict_id(send)
    send.post(f"/api/v1/conflicts/{pk}/dismiss", {"reason": "mistake"})
    return send.post(f"/api/v1/conflicts/{pk}/apply", {"reason": "meant"})


def dismiss_decided(send):
    pk = conflict_id(send)
    send.post(f"/api/v1/conflicts/{pk}/dismiss", {"reason": "mistake"})
    return send.post(f"/api/v1/conflicts/{pk}/dismiss", {"reason": "again"})


def four_eyes(send):
    submitter = send.as_("submitter", "approver")
    submitter.post("/api/v1/events", {"action": "issue-refund", "data": REFUND})
    operation = Operation.objects.get()
    return submitter.post(op(operation, "approve"), decided("approve", operation))


def by_a_viewer(path: str, body):
    def viewer(send):
        operation = brief(send)
        return send.as_("viewer", "viewer").post(path.format(key=operation.key), body)

    return viewer


def by_a_machine(path: str, body):
    def machine(send):
        operation = brief(send)
        return send.as_().post(path.format(key=operation.key), body)

    return machine


def without_the_scope(method: str, path: str, body=None):
    def missing_scope(send):
        reader = send.as_(scopes=["events"])
        return (
            reader.get(path)
            if method == "get"
            else getattr(reader, method)(path, *([body] if method == "post" else []))
        )

    return missing_scope


def nothing_named(method: str, path: str, body=None):
    def no_such(send):
        return send.post(path, body) if method == "post" else send.delete(path)

    return no_such


def invalid(path: str, body):
    def invalid_input(send):
        operation = brief(send)
        return send.post(path.format(key=operation.key), body)

    return invalid_input


def named(send, name: str):
    send.__name__ = name
    return send


def body_refusals(operation: tuple[str, str], path: str) -> list[Case]:
    """What a body gets wrong, on a route with one: each sent on its own route."""
    cases = []
    for status, send in (
        (400, malformed_json),
        (400, bad_gzip),
        (413, too_large),
        (415, not_json),
        (415, latin_1),
        (415, brotli),
    ):
        cases.append(Case(operation, status, named(lambda sender, send=send: send(sender, path=path), send.__name__)))
    return cases


def route(method: str, path: str) -> tuple[str, str]:
    return (method, path)


OPERATION_PATH = "/api/v1/operations/{key}"
CASES: list[Case] = []
for verb, ok, wrong in [
    ("approve", approve_ok, stale_fingerprint),
    ("reject", reject_ok, reject_wrong_state),
    ("replay", replay_ok, replay_wrong_state),
    ("resolve", resolve_ok, resolve_wrong_state),
    ("cancel", cancel_ok, cancel_twice),
    ("take", take_ok, take_held_by_someone_else),
]:
    where = route("post", f"{OPERATION_PATH}/{verb}")
    concrete = f"/api/v1/operations/demo:nothing/{verb}"
    CASES += [
        Case(where, 200, ok),
        Case(where, 409, wrong),
        Case(where, 403, named(without_the_scope("post", concrete, DECISIONS[verb]), f"{verb}_missing_scope")),
        Case(
            where, 403, named(by_a_viewer(f"/api/v1/operations/{{key}}/{verb}", DECISIONS[verb]), f"{verb}_by_a_viewer")
        ),
        Case(where, 404, named(nothing_named("post", concrete, DECISIONS[verb]), f"{verb}_of_nothing")),
        Case(where, 422, named(invalid(f"/api/v1/operations/{{key}}/{verb}", {"surprise": 1}), f"{verb}_invalid")),
        Case(where, 401, named(lambda send, concrete=concrete: no_token(send, path=concrete), "no_token")),
        Case(
            where, 503, unreachable(named(nothing_named("post", concrete, DECISIONS[verb]), verb)), transactional=True
        ),
        *body_refusals(where, concrete),
    ]
CASES += [
    Case(route("post", f"{OPERATION_PATH}/approve"), 403, four_eyes),
    Case(
        route("post", f"{OPERATION_PATH}/take"),
        403,
        named(by_a_machine("/api/v1/operations/{key}/take", None), "take_by_a_machine"),
    ),
]

release = route("post", f"{OPERATION_PATH}/release")
CASES += [
    Case(release, 200, release_ok),
    Case(
        release,
        403,
        named(without_the_scope("post", "/api/v1/operations/demo:nothing/release"), "release_missing_scope"),
    ),
    Case(release, 403, named(by_a_machine("/api/v1/operations/{key}/release", None), "release_by_a_machine")),
    Case(release, 404, named(nothing_named("post", "/api/v1/operations/demo:nothing/release"), "release_of_nothing")),
    Case(
        release, 401, named(lambda send: send.post("/api/v1/operations/demo:x/release", authorized=False), "no_token")
    ),
    Case(
        release,
        503,
        unreachable(named(nothing_named("post", "/api/v1/operations/demo:x/release"), "release")),
        transactional=True,
    ),
]

for verb, ok, decided_already in [("apply", apply_ok, apply_decided), ("dismiss", dismiss_ok, dismiss_decided)]:
    where = route("post", f"/api/v1/conflicts/{{conflict_id}}/{verb}")
    concrete = f"/api/v1/conflicts/999999/{verb}"
    body = {"reason": "why"}
    CASES += [
        Case(where, 200, ok),
        Case(where, 409, decided_already),
        Case(where, 403, named(without_the_scope("post", concrete, body), f"{verb}_missing_scope")),
        Case(
            where,
            403,
            named(
                lambda send, verb=verb: send.as_("viewer", "viewer").post(
                    f"/api/v1/conflicts/{conflict_id(send)}/{verb}", {"reason": "x"}
                ),
                f"{verb}_by_a_viewer",
            ),
        ),
        Case(where, 404, named(nothing_named("post", concrete, body), f"{verb}_of_nothing")),
        Case(where, 422, named(lambda send, concrete=concrete: send.post(concrete, {"reason": ""}), f"{verb}_invalid")),
        Case(where, 401, named(lambda send, concrete=concrete: no_token(send, path=concrete), "no_token")),
        Case(where, 503, unreachable(named(nothing_named("post", concrete, body), verb)), transactional=True),
        *body_refusals(where, concrete),
    ]


def list_ok(send):
    brief(send)
    return send.get("/api/v1/operations", state="any")


def detail_ok(send):
    return send.get(f"/api/v1/operations/{brief(send).key}")


def pauses_ok(send):
    set_paused(paused=True, actor="t", reason="incident", workspace=Workspace.objects.get(slug="demo"))
    return send.get("/api/v1/pauses")


def pause_ok(send):
    return send.post("/api/v1/pauses", {"scope": "workspace", "reason": "incident"})


def resume_ok(send):
    control = set_paused(paused=True, actor="t", reason="incident", workspace=Workspace.objects.get(slug="demo"))
    return send.delete(f"/api/v1/pauses/{control.pk}")


def resume_beyond_the_workspace(send):
    control = set_paused(paused=True, actor="t", reason="global")
    return send.as_().delete(f"/api/v1/pauses/{control.pk}")


def pause_by_an_approver(send):
    return send.as_("ann", "approver").post("/api/v1/pauses", {"scope": "workspace", "reason": "x"})


listing, detail = route("get", "/api/v1/operations"), route("get", OPERATION_PATH)
pauses, pause, resume = (
    route("get", "/api/v1/pauses"),
    route("post", "/api/v1/pauses"),
    route("delete", "/api/v1/pauses/{pause_id}"),
)
CASES += [
    Case(listing, 200, list_ok),
    Case(listing, 403, without_the_scope("get", "/api/v1/operations")),
    Case(listing, 422, named(lambda send: send.get("/api/v1/operations", limit="0"), "limit_zero")),
    Case(listing, 401, named(lambda send: send.get("/api/v1/operations", authorized=False), "no_token")),
    Case(listing, 503, unreachable(named(lambda send: send.get("/api/v1/operations"), "list")), transactional=True),
    Case(detail, 200, detail_ok),
    Case(detail, 403, without_the_scope("get", "/api/v1/operations/demo:x")),
    Case(detail, 404, named(lambda send: send.get("/api/v1/operations/demo:nothing"), "no_such_operation")),
    Case(detail, 401, named(lambda send: send.get("/api/v1/operations/demo:x", authorized=False), "no_token")),
    Case(
        detail, 503, unreachable(named(lambda send: send.get("/api/v1/operations/demo:x"), "read")), transactional=True
    ),
    Case(pauses, 200, pauses_ok),
    Case(pauses, 403, without_the_scope("get", "/api/v1/pauses")),
    Case(pauses, 401, named(lambda send: send.get("/api/v1/pauses", authorized=False), "no_token")),
    Case(pauses, 503, unreachable(named(lambda send: send.get("/api/v1/pauses"), "pauses")), transactional=True),
    Case(pause, 201, pause_ok),
    Case(pause, 403, without_the_scope("post", "/api/v1/pauses", {"scope": "workspace", "reason": "x"})),
    Case(pause, 403, pause_by_an_approver),
    Case(
        pause,
        422,
        named(lambda send: send.post("/api/v1/pauses", {"scope": "action", "reason": "x"}), "pause_without_its_action"),
    ),
    Case(pause, 401, named(lambda send: no_token(send, path="/api/v1/pauses"), "no_token")),
    Case(pause, 503, unreachable(pause_ok), transactional=True),
    *body_refusals(pause, "/api/v1/pauses"),
    Case(resume, 200, resume_ok),
    Case(resume, 403, without_the_scope("delete", "/api/v1/pauses/1")),
    Case(resume, 403, resume_beyond_the_workspace),
    Case(resume, 404, named(lambda send: send.delete("/api/v1/pauses/999999"), "no_such_pause")),
    Case(resume, 401, named(lambda send: send.delete("/api/v1/pauses/1", authorized=False), "no_token")),
    Case(resume, 503, unreachable(named(lambda send: send.delete("/api/v1/pauses/1"), "resume")), transactional=True),
]


@pytest.mark.slow
def test_a_request_gets_every_status_the_document_lists_for_the_management_routes():
    documented = {
        (method, path, int(status))
        for path, methods in DOCUMENT["paths"].items()
        for method, spec in methods.items()
        if MANAGEMENT_TAGS & set(spec.get("tags", []))
        for status in spec["responses"]
    }
    assert {(*case.operation, case.status) for case in CASES} == documented


@pytest.fixture
def admin_token(workspace, person) -> str:
    admin = person("boss", "admin")
    return accounts.issue_token(workspace=workspace, name="boss", actor="test", user=admin, scopes=EVERY_SCOPE)


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, id=case.id, marks=[pytest.mark.django_db(transaction=True)] if case.transactional else [])
        for case in CASES
    ],
)
def test_each_management_answer_is_a_body_its_published_schema_accepts(case, client, admin_token, request):
    client.raise_request_exception = False
    answers_as_published(case, Sender(client, admin_token), request)
