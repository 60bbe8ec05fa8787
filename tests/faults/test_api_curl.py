"""Every management route driven by curl, a client that is not the test code, against gunicorn as
`make serve` runs it, on PostgreSQL: listing and reading operations, approving (four eyes, a
machine refused, a stale fingerprint refused), rejecting, replaying, resolving, cancelling, taking
and giving back, applying and dismissing conflicts, pausing and resuming, and a token without the
route's scope refused. The workers run in this process (``process_due_operations``) against a
stand-in destination that gunicorn's process is pointed at too, so both see one configuration.
"""

import json
import subprocess
from urllib.parse import quote

import pytest

from ledger.core import accounts
from ledger.engine.processing import process_due_operations
from ledger.models import Approval, AuditEvent, Conflict, Membership, Operation, Workspace
from standin.server import start_in_thread
from tests.conftest import Standin
from tests.faults.gunicorn import running_gunicorn

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}
BRIEF = {"request_id": "B-1", "version": 1, "title": "Renewal options", "owner": "ops"}
NOTICE = {"request_id": "N-1", "version": 1, "summary": "Renewal notice", "owner": "ops"}


@pytest.fixture(scope="module")
def standin_url():
    server, url = start_in_thread()
    yield url
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def gunicorn(django_db_setup, django_db_blocker, tmp_path_factory, standin_url):
    with django_db_blocker.unblock():
        with running_gunicorn(
            tmp_path_factory.mktemp("gunicorn"), env={"OPSCONSOLE_STANDIN_URL": standin_url}
        ) as server:
            yield server


@pytest.fixture
def server(gunicorn, transactional_db, settings, standin_url):
    settings.OPSCONSOLE_STANDIN_URL = standin_url
    return gunicorn


@pytest.fixture
def standin(standin_url):
    destination = Standin(standin_url)
    yield destination
    destination.http.close()


def curl(server, token: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    """One request by curl: its status and JSON body."""
    command = ["curl", "-sS", "-X", method, "-H", f"Authorization: Bearer {token}", "-w", "\n%{http_code}"]
    if body is not None:
        command += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
    finished = subprocess.run([*command, server.url + path], capture_output=True, text=True, timeout=30)
    assert finished.returncode == 0, finished.stderr
    text, _, status = finished.stdout.rpartition("\n")
    return int(status), json.loads(text)


def op(key: str, verb: str = "") -> str:
    return f"/api/v1/operations/{quote(key, safe=':')}" + (f"/{verb}" if verb else "")


@pytest.fixture
def tokens(server, django_user_model):
    """A machine's token (every scope a machine may have), and people's with every scope: sam and
    ann approve, otto operates."""
    workspace, _ = accounts.create_workspace(slug="demo", approved_owners=["ops"], actor="test")
    every = ["events", "claims", "read", "operate", "approve"]
    found = {"machine": accounts.issue_token(workspace=workspace, name="flow", actor="test", scopes=every[:4])}
    for name, role in [("sam", "approver"), ("ann", "approver"), ("otto", "operator")]:
        user = django_user_model.objects.create_user(username=name, password="pw")
        Membership.objects.create(user=user, workspace=workspace, role=role)
        found[name] = accounts.issue_token(workspace=workspace, name=name, actor="test", user=user, scopes=every)
    found["reader"] = accounts.issue_token(workspace=workspace, name="dash", actor="test", scopes=["read"])
    return found


def test_curl_drives_every_management_route(server, tokens, standin):
    machine, sam, ann, otto = tokens["machine"], tokens["sam"], tokens["ann"], tokens["otto"]

    # Read: the list (filtered) and an operation's page.
    status, sent = curl(server, sam, "POST", "/api/v1/events", {"action": "issue-refund", "data": REFUND})
    assert status == 201, sent
    refund = sent["key"]
    status, page = curl(server, ann, "GET", "/api/v1/operations?state=pending_approval&action=issue-refund&limit=10")
    assert (status, [item["key"] for item in page["operations"]], page["next_cursor"]) == (200, [refund], None)
    status, seen = curl(server, ann, "GET", op(refund))
    assert (status, seen["payload"]["amount_cents"], seen["audit"][0]["kind"]) == (200, 4500, "reserved")

    # Approve: a machine, the submitter (four eyes) and a stale fingerprint refused; another approver approves.
    status, said = curl(server, machine, "POST", op(refund, "approve"), {"fingerprint": seen["fingerprint"]})
    assert (status, said["reason"], said["scope"]) == (403, "missing_scope", "approve")
    status, said = curl(server, sam, "POST", op(refund, "approve"), {"fingerprint": seen["fingerprint"]})
    assert (status, said["reason"]) == (403, "four_eyes")
    status, said = curl(server, ann, "POST", op(refund, "approve"), {"fingerprint": "f" * 64})
    assert (status, said["reason"]) == (409, "stale_fingerprint")
    status, said = curl(
        server, ann, "POST", op(refund, "approve"), {"fingerprint": seen["fingerprint"], "reason": "ok"}
    )
    assert (status, said["status"], said["operation"]["state"]) == (200, "approved", "pending")
    assert Approval.objects.get().approver == "ann"

    # Reject another refund.
    _, second = curl(
        server, machine, "POST", "/api/v1/events", {"action": "issue-refund", "data": REFUND | {"request_id": "R-8"}}
    )
    fingerprint = Operation.objects.get(key=second["key"]).fingerprint
    status, said = curl(
        server, ann, "POST", op(second["key"], "reject"), {"fingerprint": fingerprint, "reason": "duplicate"}
    )
    assert (status, said["operation"]["state"]) == (200, "rejected")

    # Take, give back, cancel.
    _, brief = curl(server, machine, "POST", "/api/v1/events", {"action": "prepare-brief", "data": BRIEF})
    key = brief["key"]
    status, said = curl(server, otto, "POST", op(key, "take"))
    assert (status, said["status"], said["operation"]["assigned_to"]) == (200, "taken", "otto")
    status, said = curl(server, otto, "POST", op(key, "release"))
    assert (status, said["status"]) == (200, "released")
    status, said = curl(server, otto, "POST", op(key, "cancel"), {"reason": "not wanted"})
    assert (status, said["operation"]["state"]) == (200, "cancelled")

    # Conflicts: apply one, dismiss another.
    for request_id, verb in [("B-2", "apply"), ("B-3", "dismiss")]:
        curl(
            server,
            machine,
            "POST",
            "/api/v1/events",
            {"action": "prepare-brief", "data": BRIEF | {"request_id": request_id}},
        )
        status, blocked = curl(
            server,
            machine,
            "POST",
            "/api/v1/events",
            {"action": "prepare-brief", "data": BRIEF | {"request_id": request_id, "title": "Other"}},
        )
        assert (status, blocked["reason"]) == (409, "payload_conflict")
        status, said = curl(
            server, otto, "POST", f"/api/v1/conflicts/{blocked['conflict_id']}/{verb}", {"reason": "decided"}
        )
        assert (status, said["status"]) == (200, "applied" if verb == "apply" else "dismissed")
    assert sorted(Conflict.objects.values_list("status", flat=True)) == ["applied", "dismissed"]

    # Replay an operation the destination refused; resolve one whose answer was lost. (The
    # approved refund runs first, so that the faults meet the notices.)
    process_due_operations()
    standin.fail_next({"kind": "status", "status": 422})
    _, refused = curl(server, machine, "POST", "/api/v1/events", {"action": "send-notice", "data": NOTICE})
    process_due_operations()
    status, said = curl(server, otto, "POST", op(refused["key"], "replay"), {"reason": "template fixed"})
    assert status == 200, said
    assert (said["status"], said["operation"]["state"]) == ("replayed", "pending")
    process_due_operations()
    standin.fail_next({"kind": "drop_after_commit"})
    _, lost = curl(
        server, machine, "POST", "/api/v1/events", {"action": "send-notice", "data": NOTICE | {"request_id": "N-2"}}
    )
    process_due_operations()
    assert Operation.objects.get(key=lost["key"]).state == "unknown"
    status, said = curl(
        server, otto, "POST", op(lost["key"], "resolve"), {"external_id": "rec_1", "note": "seen at the vendor"}
    )
    assert (status, said["operation"]["state"]) == (200, "succeeded"), said

    # Pauses: a machine pulls one, lists it, releases it.
    status, pulled = curl(
        server, machine, "POST", "/api/v1/pauses", {"scope": "action", "action": "send-notice", "reason": "incident"}
    )
    assert status == 201, pulled
    (pause,) = pulled["pauses"]
    status, listed = curl(server, machine, "GET", "/api/v1/pauses")
    assert (status, [p["id"] for p in listed["pauses"]]) == (200, [pause["id"]])
    status, resumed = curl(server, machine, "DELETE", f"/api/v1/pauses/{pause['id']}")
    assert (status, resumed["status"]) == (200, "resumed")

    # A token without the route's scope; an unknown key.
    status, said = curl(server, tokens["reader"], "POST", "/api/v1/pauses", {"scope": "workspace", "reason": "x"})
    assert (status, said["scope"]) == (403, "operate")
    status, said = curl(server, otto, "POST", op("demo:nope", "cancel"), {"reason": "x"})
    assert (status, said["status"]) == (404, "not_found")

    kinds = set(AuditEvent.objects.filter(workspace=Workspace.objects.get(slug="demo")).values_list("kind", flat=True))
    decided = {"approval_approved", "approval_rejected", "taken", "released", "cancelled", "conflict_applied"}
    assert decided | {"conflict_dismissed", "replayed", "resolved", "paused", "resumed"} <= kinds
