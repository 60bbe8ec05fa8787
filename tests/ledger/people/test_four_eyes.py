"""Four eyes that see people: nobody who submitted, changed (applied a conflict to) or replayed an
operation may approve it, through the console or the command line; a token with no person is a
machine's, and its operations can be approved by any approver.

Every operation here is made through a real entry point (a person's or a machine's token on the
HTTP API, ``submit --as``, the console and the commands), never by writing who submitted it.
"""

import json
import re
import sys
from io import StringIO

import pytest
from django.contrib.messages import get_messages
from django.core.management import CommandError, call_command

from ledger.engine.processing import process_due_operations
from ledger.models import Approval, AuditEvent, Conflict, Contribution, Delivery, Operation

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}
APPROVER = "approver"
ADMIN = "admin"
VIA = ["console", "command"]


def four_eyes(username: str, roles: str, key: str, verb: str = "approve") -> str:
    return (
        f"{username} {roles} {key}, so cannot {verb} it: four eyes means another person with the approve "
        "permission must."
    )


# --- people and entry points --------------------------------------------------------------------


@pytest.fixture
def second_approver(person):
    return person("second", APPROVER)


@pytest.fixture(params=["superuser", "review+approve"])
def admin(request, person, django_user_model):
    """Someone who may both review (apply conflicts, replay) and approve."""
    if request.param == "superuser":
        return django_user_model.objects.create_superuser("admin", password="pw")
    return person("admin", ADMIN)


def last_line(command: str, *args) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue().splitlines()[-1]


def issue_token(username: str | None = None, workspace: str = "demo") -> str:
    """A token issued the way an operator does, with ``token issue`` (the token is the last line)."""
    return last_line("token", "issue", workspace, "--name", "laptop", *(["--user", username] if username else []))


def send(client, token: str, **data):
    """POST one issue-refund event to the HTTP API with ``token``."""
    return client.post(
        "/api/v1/events",
        json.dumps({"action": "issue-refund", "data": REFUND | data}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def send_refund(client, token: str, **data) -> Operation:
    response = send(client, token, **data)
    assert response.status_code == 201, response.json()
    operation = Operation.objects.get(pk=response.json()["operation"]["id"])
    assert operation.state == "pending_approval"
    return operation


def messages_of(response) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]


def operation_page(client, user, operation) -> str:
    client.force_login(user)
    response = client.get(f"/console/operations/{operation.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def shown_fingerprint(page: str) -> str:
    [fingerprint] = re.findall(r'name="fingerprint" value="([0-9a-f]+)"', page)
    return fingerprint


def by_command(verb: str, user, operation, note: str) -> str:
    """Run the ``verb`` command (approve, reject) as ``user``; the error it was refused with, or ""."""
    try:
        call_command(
            verb,
            operation.key,
            "--workspace",
            operation.workspace.slug,
            "--as",
            user.get_username(),
            "--note",
            note,
            stdout=StringIO(),
        )
    except CommandError as exc:
        return str(exc)
    return ""


def approve(via: str, client, user, operation, note: str = "") -> str:
    """Approve as ``user`` through ``via``; returns the error it was refused with, or "" if approved.

    Through the console this is what a person does: open the page, follow Approve to its confirmation,
    then POST the fingerprint the confirmation shows (when the page offers no Approve, a forged POST
    with the operation's fingerprint)."""
    if via == "command":
        return by_command("approve", user, operation, note)
    page = operation_page(client, user, operation)
    if ">Approve</a>" in page:
        fingerprint = shown_fingerprint(client.get(f"/console/operations/{operation.pk}/approve/").content.decode())
    else:
        fingerprint = operation.fingerprint
    response = client.post(f"/console/operations/{operation.pk}/approve/", {"note": note, "fingerprint": fingerprint})
    assert response.status_code == 302
    [(level, message)] = messages_of(response)
    # Approved, the person lands on the next operation awaiting their decision (the message names it).
    return "" if level == "success" and message.startswith(f"Approved {operation.key}. ") else message


def assert_refused(via: str, client, user, operation, message: str) -> None:
    """``user`` cannot approve ``operation`` through ``via``: the console offers no Approve button
    and says why, the service refuses a POST anyway, and nothing changes."""
    approvals = Approval.objects.filter(operation=operation).count()
    if via == "console":
        page = operation_page(client, user, operation)
        assert ">Approve</a>" not in page
        assert "so another approver must approve or reject it (four eyes; " in page
        assert ">Reject</button>" not in page
    assert approve(via, client, user, operation) == message
    operation.refresh_from_db()
    assert operation.state == "pending_approval"
    assert Approval.objects.filter(operation=operation).count() == approvals
    assert not AuditEvent.objects.filter(
        operation=operation, kind="approval_approved", actor=user.get_username()
    ).exists()


def assert_approved(via: str, client, user, operation) -> None:
    if via == "console":
        page = operation_page(client, user, operation)
        assert ">Approve</a>" in page
        assert "so another approver must approve or reject it (four eyes" not in page
    assert approve(via, client, user, operation) == ""
    operation.refresh_from_db()
    assert operation.state == "pending"
    latest = operation.approvals.order_by("-id").first()
    assert (latest.decision, latest.approver, latest.fingerprint) == (
        "approved",
        user.get_username(),
        operation.fingerprint,
    )


def contributions(operation) -> list[tuple[str, str]]:
    return sorted(Contribution.objects.filter(operation=operation).values_list("user__username", "kind"))


# --- 1. an approver who submitted with their own token ------------------------------------------


@pytest.fixture
def own_refund(client, workspace, approver):
    """The approver sent the refund with a token issued to them."""
    return send_refund(client, issue_token("approver"))


def test_it_records_the_person_behind_a_token_as_the_submitter(client, workspace, approver, own_refund):
    """A person's token submits as that person: the delivery, the operation, the audit trail and the
    console name them, and they are a contributor of the operation."""
    delivery = Delivery.objects.get(operation=own_refund)
    assert (delivery.source, delivery.outcome, delivery.submitted_by, delivery.person) == (
        "api",
        "accepted",
        "approver",
        approver,
    )
    assert own_refund.submitted_by == "approver"
    reserved = AuditEvent.objects.get(operation=own_refund, kind="reserved")
    assert (reserved.actor, reserved.message) == ("approver", f"delivery {delivery.pk} via api")
    assert contributions(own_refund) == [("approver", "submitted")]
    assert "approver (submitted)" in operation_page(client, approver, own_refund)


@pytest.mark.parametrize("via", VIA)
def test_it_refuses_an_approver_approving_a_refund_they_sent_with_their_own_token(
    client, approver, second_approver, own_refund, via
):
    """The submitter cannot approve their refund; another approver can."""
    assert_refused(via, client, approver, own_refund, four_eyes("approver", "submitted", own_refund.key))

    assert_approved(via, client, second_approver, own_refund)


@pytest.mark.parametrize("endpoint", ["/api/v1/events", "/api/v1/events/batch"])
def test_it_makes_the_person_a_submitter_on_every_api_endpoint(client, workspace, approver, endpoint):
    """The batch endpoint submits as the token's person too."""
    event = {"action": "issue-refund", "data": REFUND}
    body = event if endpoint.endswith("events") else {"events": [event]}
    response = client.post(
        endpoint,
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {issue_token('approver')}",
    )
    assert response.status_code in (200, 201), response.json()
    operation = Operation.objects.get()

    assert contributions(operation) == [("approver", "submitted")]
    assert_refused("command", client, approver, operation, four_eyes("approver", "submitted", operation.key))


# --- 2. an admin who raised the amount by applying a conflict -----------------------------------


def raise_amount(client, token, operation, admin, apply_via: str) -> Conflict:
    """Send the same key with a higher amount (409), then ``admin`` applies the conflict."""
    response = send(client, token, amount_cents=450_000)
    assert response.status_code == 409, response.json()
    conflict = Conflict.objects.get(pk=response.json()["conflict_id"])
    if apply_via == "console":
        client.force_login(admin)
        response = client.post(f"/console/conflicts/{conflict.pk}/apply/", {"reason": "sender corrected the amount"})
        assert messages_of(response) == [
            ("success", f"Applied the incoming payload of conflict {conflict.pk} to {operation.key}.")
        ]
    else:
        call_command(
            "conflict",
            "apply",
            str(conflict.pk),
            "--as",
            "admin",
            "--reason",
            "sender corrected the amount",
            stdout=StringIO(),
        )
    conflict.refresh_from_db()
    operation.refresh_from_db()
    assert (conflict.status, conflict.decided_by, operation.payload["amount_cents"]) == ("applied", "admin", 450_000)
    return conflict


@pytest.mark.parametrize("via", VIA)
@pytest.mark.parametrize("apply_via", VIA)
def test_it_refuses_an_admin_approving_a_refund_whose_amount_they_raised(
    client, workspace, token, admin, approver, standin, apply_via, via
):
    """Applying a conflict changes the payload: whoever applied it cannot approve the result (console
    or command, however the conflict was applied); another approver can, and the raised refund runs."""
    refund = send_refund(client, token)
    raise_amount(client, token, refund, admin, apply_via)
    assert contributions(refund) == [("admin", "changed")]

    assert_refused(via, client, admin, refund, four_eyes("admin", "changed", refund.key))

    assert_approved(via, client, approver, refund)
    process_due_operations()
    [record] = standin.records()
    assert record["payload"]["amount_cents"] == 450_000
    assert Operation.objects.get(pk=refund.pk).state == "succeeded"


@pytest.mark.parametrize("via", VIA)
def test_it_refuses_the_person_whose_token_sent_an_applied_conflict(
    client, workspace, token, admin, approver, second_approver, via
):
    """The payload a conflict brings in is the sender's: once applied, its sender is a submitter
    of the operation too (and the admin who applied it a changer); neither may approve."""
    refund = send_refund(client, token)
    raise_amount(client, issue_token("approver"), refund, admin, "command")

    assert contributions(refund) == [("admin", "changed"), ("approver", "submitted")]
    assert_refused(via, client, approver, refund, four_eyes("approver", "submitted", refund.key))
    assert_refused(via, client, admin, refund, four_eyes("admin", "changed", refund.key))
    assert_approved(via, client, second_approver, refund)


# --- 3. an admin who replayed a refund ----------------------------------------------------------


@pytest.fixture
def failed_refund(client, workspace, token, approver, standin):
    """A machine's refund, approved by the approver, that the destination refused for good (422)."""
    refund = send_refund(client, token)
    standin.fail_next({"kind": "status", "status": 422})
    call_command("approve", refund.key, "--workspace", "demo", "--as", "approver", stdout=StringIO())
    process_due_operations()
    refund.refresh_from_db()
    assert refund.state == "needs_review"
    assert standin.records() == []
    return refund


def replay(replay_via: str, client, admin, operation) -> None:
    if replay_via == "console":
        client.force_login(admin)
        response = client.post(f"/console/operations/{operation.pk}/replay/", {"reason": "customer record fixed"})
        assert messages_of(response) == [("success", f"Replayed {operation.key}.")]
    else:
        call_command(
            "replay",
            operation.key,
            "--workspace",
            "demo",
            "--as",
            "admin",
            "--reason",
            "customer record fixed",
            stdout=StringIO(),
        )
    operation.refresh_from_db()
    assert operation.state == "pending_approval"


@pytest.mark.parametrize("via", VIA)
@pytest.mark.parametrize("replay_via", VIA)
def test_it_refuses_an_admin_approving_a_refund_they_replayed(
    client, admin, approver, standin, failed_refund, replay_via, via
):
    """Replaying runs the refund again: whoever replayed it cannot approve the new run; another
    approver can, and the worker then performs it once."""
    replay(replay_via, client, admin, failed_refund)
    assert contributions(failed_refund) == [("admin", "replayed")]
    delivery = Delivery.objects.get(operation=failed_refund, source="replay")
    assert (delivery.submitted_by, delivery.person) == ("admin", admin)

    assert_refused(via, client, admin, failed_refund, four_eyes("admin", "replayed", failed_refund.key))

    assert_approved(via, client, approver, failed_refund)
    process_due_operations()
    assert len(standin.records()) == 1
    assert Operation.objects.get(pk=failed_refund.pk).state == "succeeded"
    assert list(Approval.objects.filter(operation=failed_refund).values_list("approver", flat=True)) == [
        "approver",
        "approver",
    ]


# --- 4. a machine's refund ----------------------------------------------------------------------


@pytest.mark.parametrize("via", VIA)
@pytest.mark.parametrize("machine", ["create_workspace token", "token issue without --user"])
def test_it_lets_any_approver_approve_a_machines_refund(client, workspace, token, approver, machine, via):
    """A token with no person is a machine's: nobody is behind its refund, so any approver may
    approve it."""
    refund = send_refund(client, token if machine.startswith("create") else issue_token())

    delivery = Delivery.objects.get(operation=refund)
    assert delivery.person is None
    assert delivery.submitted_by.startswith("token:oc_")
    assert contributions(refund) == []
    assert_approved(via, client, approver, refund)


# --- 5. submit --as -----------------------------------------------------------------------------


@pytest.mark.parametrize("via", VIA)
@pytest.mark.parametrize("source", ["file", "stdin"])
def test_it_refuses_an_approver_approving_what_they_submitted_on_the_command_line(
    client, workspace, approver, second_approver, tmp_path, monkeypatch, source, via
):
    """``submit --as approver`` makes the approver the submitter, from a file or standard input."""
    line = json.dumps({"action": "issue-refund", "data": REFUND}) + "\n"
    if source == "file":
        path = tmp_path / "events.jsonl"
        path.write_text(line, encoding="utf-8")
        args = [str(path)]
    else:
        monkeypatch.setattr(sys, "stdin", StringIO(line))
        args = ["-"]
    out = StringIO()
    call_command("submit", *args, "--workspace", "demo", "--as", "approver", stdout=out)
    assert json.loads(out.getvalue().splitlines()[0])["status"] == "accepted"
    refund = Operation.objects.get()
    delivery = Delivery.objects.get(operation=refund)
    assert (delivery.source, delivery.submitted_by, delivery.person) == ("cli", "approver", approver)
    assert contributions(refund) == [("approver", "submitted")]

    assert_refused(via, client, approver, refund, four_eyes("approver", "submitted", refund.key))
    assert_approved(via, client, second_approver, refund)


def test_it_treats_submit_without_as_as_a_machine(client, workspace, approver, tmp_path):
    """Without ``--as`` the command line is the machine ``cli``: any approver may approve."""
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps({"action": "issue-refund", "data": REFUND}) + "\n", encoding="utf-8")
    call_command("submit", str(path), "--workspace", "demo", stdout=StringIO())
    refund = Operation.objects.get()

    assert (refund.submitted_by, contributions(refund)) == ("cli", [])
    assert_approved("command", client, approver, refund)


# --- 6. create_workspace --user and token list ----------------------------------------------------


def test_it_gives_the_first_token_of_a_workspace_to_its_user(client, approver, second_approver):
    """``create_workspace other --user approver``: the first token is the approver's, so what it
    submits the approver cannot approve; ``token list`` names each token's owner."""
    first = last_line("create_workspace", "other", "--user", "approver")
    machine = issue_token(workspace="other")

    refund = send_refund(client, first)
    assert contributions(refund) == [("approver", "submitted")]
    assert refund.workspace.slug == "other"
    for via in VIA:
        assert_refused(via, client, approver, refund, four_eyes("approver", "submitted", refund.key))

    out = StringIO()
    call_command("token", "list", "other", stdout=out)
    owners = {line.split()[0]: line.split()[2] for line in out.getvalue().splitlines()}
    assert owners == {first[:8]: "approver", machine[:8]: "machine"}
    call_command("member", "add", "other", "second", "--role", "approver", stdout=StringIO())
    assert_approved("command", client, second_approver, refund)


def test_it_refuses_a_token_for_someone_who_is_not_a_user(workspace):
    """A token cannot be given to a person the ledger does not know (it would be a machine's)."""
    with pytest.raises(CommandError, match="No active user 'ghost'."):
        issue_token("ghost")
    with pytest.raises(CommandError, match="No active user 'ghost'."):
        call_command("create_workspace", "other", "--user", "ghost", stdout=StringIO())


# --- 7. rejecting your own work -----------------------------------------------------------------


def reject(via: str, client, user, operation, note: str = "sent by mistake") -> str:
    """Reject as ``user`` through ``via``; returns the error it was refused with, or "" if rejected.
    Through the console: a POST of the reject form (forged with the operation's fingerprint when the
    page offers no Reject)."""
    if via == "command":
        return by_command("reject", user, operation, note)
    page = operation_page(client, user, operation)
    fingerprint = shown_fingerprint(page) if ">Reject</button>" in page else operation.fingerprint
    response = client.post(f"/console/operations/{operation.pk}/reject/", {"note": note, "fingerprint": fingerprint})
    assert response.status_code == 302
    [(level, message)] = messages_of(response)
    return "" if level == "success" and message.startswith(f"Rejected {operation.key}. ") else message


def assert_reject_refused(via: str, client, user, operation, message: str) -> None:
    if via == "console":
        page = operation_page(client, user, operation)
        assert ">Reject</button>" not in page
        assert ">Approve</a>" not in page
    assert reject(via, client, user, operation) == message
    operation.refresh_from_db()
    assert operation.state == "pending_approval"
    assert not operation.approvals.filter(decision="rejected").exists()
    assert not AuditEvent.objects.filter(operation=operation, kind="approval_rejected").exists()


@pytest.mark.parametrize("via", VIA)
def test_it_refuses_a_submitter_rejecting_their_own_refund(client, approver, second_approver, own_refund, standin, via):
    """A rejection is final (the key never runs), so it is a decision like approving: the person
    who sent the refund cannot take it alone; another approver can."""
    assert_reject_refused(
        via, client, approver, own_refund, four_eyes("approver", "submitted", own_refund.key, verb="reject")
    )

    assert reject(via, client, second_approver, own_refund) == ""
    own_refund.refresh_from_db()
    assert own_refund.state == "rejected"
    assert list(own_refund.approvals.values_list("decision", "approver")) == [("rejected", "second")]
    assert process_due_operations() == 0
    assert standin.records() == []


@pytest.mark.parametrize("via", VIA)
def test_it_refuses_an_admin_rejecting_a_refund_they_replayed(client, admin, approver, standin, failed_refund, via):
    replay("command", client, admin, failed_refund)

    assert_reject_refused(
        via, client, admin, failed_refund, four_eyes("admin", "replayed", failed_refund.key, verb="reject")
    )

    assert reject(via, client, approver, failed_refund) == ""
