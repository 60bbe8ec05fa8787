"""A person's decisions over the API: approve and reject (four eyes, the payload's fingerprint),
replay, resolve, cancel, take and give back, and each refusal with its status and reason. The
operations are made through the real entry points (a machine's token on /events, the workers
against a stand-in destination), never by writing rows."""

import pytest

from ledger.engine.processing import process_due_operations
from ledger.models import Approval, AuditEvent, Contribution, Operation
from tests.conftest import event, external_event

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def send_refund(machine, request_id: str = "R-7") -> Operation:
    answer = machine.post("/api/v1/events", {"action": "issue-refund", "data": REFUND | {"request_id": request_id}})
    assert answer.status_code == 201, answer.content
    return Operation.objects.get(key=answer.json()["key"])


@pytest.fixture
def machine(caller):
    return caller()


@pytest.fixture
def refund(machine) -> Operation:
    operation = send_refund(machine)
    assert operation.state == "pending_approval"
    return operation


def path(operation: Operation, verb: str) -> str:
    return f"/api/v1/operations/{operation.key}/{verb}"


def refused(response, status: int, reason: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert (body["status"], body["reason"]) == ("refused", reason), body
    return body


# --- approve and reject ---------------------------------------------------------------------------


def test_it_approves_for_the_payload_the_approver_saw(caller, approver, refund):
    seen = caller("approver").get(f"/api/v1/operations/{refund.key}").json()

    response = caller("approver").post(path(refund, "approve"), {"fingerprint": seen["fingerprint"], "reason": "ok"})

    assert response.status_code == 200, response.content
    assert response.json()["status"] == "approved"
    assert response.json()["operation"]["state"] == "pending"
    approval = Approval.objects.get(operation=refund)
    assert (approval.decision, approval.approver, approval.fingerprint) == ("approved", "approver", refund.fingerprint)


def test_it_rejects_with_a_reason(caller, approver, refund):
    response = caller("approver").post(path(refund, "reject"), {"fingerprint": refund.fingerprint, "reason": "dupe"})

    assert response.status_code == 200, response.content
    assert response.json()["status"] == "rejected"
    refund.refresh_from_db()
    assert refund.state == "rejected"


def test_four_eyes_the_submitters_token_is_refused_another_approvers_accepted(caller, person, workspace):
    """The person whose token sent the refund may not approve it; another approver may."""
    person("submitter", "approver")
    person("second", "approver")
    own = send_refund(caller("submitter"))

    mine = caller("submitter").post(path(own, "approve"), {"fingerprint": own.fingerprint})
    theirs = caller("second").post(path(own, "approve"), {"fingerprint": own.fingerprint})

    body = refused(mine, 403, "four_eyes")
    assert "submitter submitted" in body["detail"]
    assert "four eyes" in body["detail"]
    assert theirs.status_code == 200, theirs.content
    assert Approval.objects.get(operation=own).approver == "second"


def test_a_machine_token_is_refused_approving_whatever_its_scopes(machine, refund, workspace):
    """A machine's token cannot be given the approve scope, and asking the route is refused."""
    answer = refused(machine.post(path(refund, "approve"), {"fingerprint": refund.fingerprint}), 403, "missing_scope")
    assert answer["scope"] == "approve"
    # Not "ask for the scope", which no machine's token can have: what would work instead.
    assert "A machine's token can never have it: only people approve. Use an approver's own token" in answer["detail"]
    assert "Ask for a token with it" not in answer["detail"]
    # Even with the scope written into its row by hand (the services refuse it too), it is no person.
    from ledger.models import ApiToken

    ApiToken.objects.filter(workspace=workspace, user=None).update(scopes=["read", "approve"])

    refused(machine.post(path(refund, "approve"), {"fingerprint": refund.fingerprint}), 403, "person_only")
    refused(
        machine.post(path(refund, "reject"), {"fingerprint": refund.fingerprint, "reason": "no"}), 403, "person_only"
    )
    assert not Approval.objects.exists()


def test_a_stale_fingerprint_is_refused_409_and_nothing_is_approved(caller, approver, refund):
    response = caller("approver").post(path(refund, "approve"), {"fingerprint": "0" * 64})

    body = refused(response, 409, "stale_fingerprint")
    assert body["state"] == "pending_approval"
    refund.refresh_from_db()
    assert refund.state == "pending_approval"
    assert not Approval.objects.exists()


def test_a_person_without_the_approve_role_is_refused_403(caller, reviewer, refund):
    body = refused(caller("operator").post(path(refund, "approve"), {"fingerprint": refund.fingerprint}), 403, "role")
    assert body["detail"] == "operator may not approve or reject in workspace demo."


def test_an_operation_not_awaiting_approval_is_refused_409(caller, approver, machine):
    machine.post("/api/v1/events", event())
    operation = Operation.objects.get()

    body = refused(
        caller("approver").post(path(operation, "approve"), {"fingerprint": operation.fingerprint}), 409, "wrong_state"
    )
    assert body["state"] == "pending"


def test_a_rejection_needs_a_reason_and_a_note_may_not_quote_a_sensitive_value(caller, approver, refund):
    no_reason = caller("approver").post(path(refund, "reject"), {"fingerprint": refund.fingerprint, "reason": " "})
    quoting = caller("approver").post(
        path(refund, "reject"), {"fingerprint": refund.fingerprint, "reason": "C-1001 no"}
    )

    assert refused(no_reason, 422, "invalid_input")["errors"][0]["field"] == "reason"
    body = refused(quoting, 422, "sensitive_text")
    assert body["errors"][0]["field"] == "reason"
    assert "C-1001" not in str(body)
    refund.refresh_from_db()
    assert refund.state == "pending_approval"


# --- replay, resolve, cancel ----------------------------------------------------------------------


@pytest.fixture
def refused_notice(workspace, standin, machine):
    """A send-notice the destination refused for good (422): needs review."""
    standin.fail_next({"kind": "status", "status": 422})
    machine.post("/api/v1/events", external_event())
    process_due_operations()
    operation = Operation.objects.get()
    assert operation.state == "needs_review"
    return operation


def test_it_replays_an_operation_that_needs_review_recording_the_person(caller, reviewer, refused_notice):
    response = caller("operator").post(path(refused_notice, "replay"), {"reason": "fixed the template"})

    assert response.status_code == 200, response.content
    assert response.json()["status"] == "replayed"
    assert response.json()["operation"]["state"] == "pending"
    assert Contribution.objects.filter(operation=refused_notice, user=reviewer, kind="replayed").exists()


def test_a_replay_is_refused_for_a_role_a_state_and_without_a_reason(caller, approver, reviewer, refused_notice):
    refused(caller("approver").post(path(refused_notice, "replay"), {"reason": "x"}), 403, "role")
    refused(caller("operator").post(path(refused_notice, "replay"), {}), 422, "invalid_input")
    caller("operator").post(path(refused_notice, "replay"), {"reason": "again"})

    body = refused(caller("operator").post(path(refused_notice, "replay"), {"reason": "twice"}), 409, "wrong_state")
    assert body["state"] == "pending"


def test_it_resolves_an_unknown_operation_with_the_record_found(caller, reviewer, unknown_notice):
    response = caller("operator").post(
        path(unknown_notice, "resolve"), {"external_id": "rec_9", "note": "found it in the vendor's dashboard"}
    )

    assert response.status_code == 200, response.content
    assert response.json()["operation"]["state"] == "succeeded"
    assert response.json()["operation"]["external_id"] == "rec_9"


def test_a_resolve_of_a_pending_operation_is_refused_409_and_a_blank_record_422(caller, reviewer, machine):
    machine.post("/api/v1/events", event())
    operation = Operation.objects.get()

    refused(caller("operator").post(path(operation, "resolve"), {"external_id": "x", "note": "y"}), 409, "wrong_state")
    blank = caller("operator").post(path(operation, "resolve"), {"external_id": " \t", "note": "y"})
    assert refused(blank, 422, "invalid_input")["errors"][0]["field"] == "external_id"


def test_a_record_id_quoting_a_sensitive_value_is_refused_beside_external_id(caller, reviewer, refund):
    Operation.objects.filter(pk=refund.pk).update(state="unknown")  # test setup: a try may have acted

    quoting = caller("operator").post(path(refund, "resolve"), {"external_id": "C-1001", "note": "seen at the vendor"})

    body = refused(quoting, 422, "sensitive_text")
    assert body["errors"][0]["field"] == "external_id"
    assert "C-1001" not in str(body)
    refund.refresh_from_db()
    assert refund.state == "unknown"


def test_it_cancels_a_pending_operation_and_refuses_a_second_cancel(caller, reviewer, machine):
    machine.post("/api/v1/events", event())
    operation = Operation.objects.get()

    first = caller("operator").post(path(operation, "cancel"), {"reason": "sent by mistake"})
    second = caller("operator").post(path(operation, "cancel"), {"reason": "again"})

    assert first.status_code == 200
    assert first.json()["status"] == "cancelled"
    assert refused(second, 409, "wrong_state")["state"] == "cancelled"


def test_a_machine_with_operate_replays_as_an_operator_named_by_its_token(machine, refused_notice, approver):
    """Nobody's work: the replay names the token, and no person becomes a contributor."""
    response = machine.post(path(refused_notice, "replay"), {"reason": "vendor recovered"})

    assert response.status_code == 200, response.content
    replayed = AuditEvent.objects.get(operation=refused_notice, kind="replayed")
    assert replayed.actor == f"token:{machine.token[:8]}"
    assert not Contribution.objects.exists()
    assert refused_notice.deliveries.get(source="replay").person is None


def test_a_machine_cancels_and_resolves_but_never_takes(machine, unknown_notice, caller):
    brief = caller().post("/api/v1/events", event())
    operation = Operation.objects.get(key=brief.json()["key"])

    for verb in ("take", "release"):
        refused(machine.post(path(operation, verb)), 403, "person_only")
    cancelled = machine.post(path(operation, "cancel"), {"reason": "not wanted"})
    resolved = machine.post(path(unknown_notice, "resolve"), {"external_id": "rec_1", "note": "seen at the vendor"})

    assert cancelled.json()["operation"]["state"] == "cancelled"
    assert resolved.json()["operation"]["state"] == "succeeded"


def test_a_machine_refused_by_the_api_is_refused_by_the_services_too(refund, workspace):
    """The API never hands a machine to the approval service; if code did, the rules refuse it."""
    from ledger.core import roles
    from ledger.people import approvals

    machine = roles.Machine(workspace_id=workspace.pk, label="token:oc_abcde", role="operator")

    with pytest.raises(approvals.ApprovalError, match="token:oc_abcde may not approve or reject in workspace demo"):
        approvals.approve_operation(refund, user=machine, fingerprint=refund.fingerprint)
    with pytest.raises(ValueError, match="a machine may act as a viewer or an operator"):
        roles.Machine(workspace_id=workspace.pk, label="token:x", role="approver")


def test_a_machine_acts_in_its_own_workspace_only(workspace, machine):
    from ledger.core import roles

    other, _ = accounts_create("other")
    operator = roles.Machine(workspace_id=workspace.pk, label="token:x", role="operator")

    assert roles.can(operator, roles.REVIEW, workspace.pk)
    assert not roles.can(operator, roles.REVIEW, other.pk)
    assert not roles.can(operator, roles.PAUSE, None)
    assert not roles.can(roles.Machine(workspace_id=workspace.pk, label="token:y"), roles.REVIEW, workspace.pk)


def accounts_create(slug: str):
    from ledger.core import accounts

    return accounts.create_workspace(slug=slug, approved_owners=["ops"], actor="test")


# --- take and give back ---------------------------------------------------------------------------


def test_it_takes_and_gives_back_an_operation(caller, alice, bob, machine):
    machine.post("/api/v1/events", event())
    operation = Operation.objects.get()

    taken = caller("alice").post(path(operation, "take"))
    again = caller("alice").post(path(operation, "take"))
    bobs = caller("bob").post(path(operation, "take"))
    over = caller("bob").post(path(operation, "take"), {"take_over": True})
    alices_release = caller("alice").post(path(operation, "release"))
    released = caller("bob").post(path(operation, "release"))

    assert (taken.json()["status"], taken.json()["operation"]["assigned_to"]) == ("taken", "alice")
    assert again.json()["status"] == "unchanged"
    assert refused(bobs, 409, "held_by_someone_else")["detail"].startswith("alice has taken")
    assert (over.json()["status"], over.json()["operation"]["assigned_to"]) == ("taken", "bob")
    assert alices_release.json()["status"] == "unchanged"
    assert (released.json()["status"], released.json()["operation"]["assigned_to"]) == ("released", None)
    kinds = list(
        AuditEvent.objects.filter(operation=operation, kind__in=["taken", "taken_over", "released"]).values_list(
            "kind", "actor"
        )
    )
    assert kinds == [("taken", "alice"), ("taken_over", "bob"), ("released", "bob")]


def test_a_finished_operation_is_not_taken(caller, alice, machine):
    machine.post("/api/v1/events", event())
    operation = Operation.objects.get()
    Operation.objects.filter(pk=operation.pk).update(state="succeeded")

    body = refused(caller("alice").post(path(operation, "take")), 409, "wrong_state")

    assert (body["detail"], body["state"]) == (
        "This operation has finished (succeeded): nothing is left to take.",
        "succeeded",
    )
    assert Operation.objects.get().assigned_to is None


def test_a_viewer_may_not_take(caller, person, machine):
    person("vera", "viewer")
    machine.post("/api/v1/events", event())

    refused(caller("vera").post(path(Operation.objects.get(), "take")), 403, "role")


# --- what every decision route refuses alike ------------------------------------------------------

# A valid body of each route.
BODIES = {
    "approve": {"fingerprint": "f"},
    "reject": {"fingerprint": "f", "reason": "r"},
    "replay": {"reason": "r"},
    "resolve": {"external_id": "e", "note": "n"},
    "cancel": {"reason": "r"},
    "take": None,
    "release": None,
}


@pytest.mark.parametrize("verb", BODIES)
def test_an_unknown_key_is_404(caller, admin_person, verb):
    response = caller("boss").post(f"/api/v1/operations/demo:nope/{verb}", BODIES[verb])

    assert response.status_code == 404, response.content
    assert response.json() == {"status": "not_found", "detail": "No operation with this key in this workspace."}


@pytest.fixture
def admin_person(person):
    return person("boss", "admin")


@pytest.mark.parametrize("verb", ["approve", "reject", "replay", "resolve", "cancel"])
def test_a_body_that_is_not_json_is_refused_and_nothing_recorded(caller, approver, refund, verb):
    from ledger.models import Delivery

    deliveries = Delivery.objects.count()
    malformed = caller("approver").post(path(refund, verb), "{not json")
    form = caller("approver").client.post(
        path(refund, verb), "reason=x", content_type="application/x-www-form-urlencoded", **caller("approver")._auth()
    )
    unknown_field = caller("approver").post(path(refund, verb), {"fingerprint": "f", "reason": "r", "surprise": 1})

    refused(malformed, 400, "malformed_json")
    refused(form, 415, "unsupported_media_type")
    assert refused(unknown_field, 422, "invalid_input")["errors"]
    assert Delivery.objects.count() == deliveries


def test_a_token_without_the_operate_scope_is_refused_naming_it(caller, reviewer, refused_notice):
    reader = caller("operator", scopes=["read"])

    body = refused(reader.post(path(refused_notice, "replay"), {"reason": "x"}), 403, "missing_scope")

    assert body["scope"] == "operate"
    assert "lacks the operate scope" in body["detail"]
    assert "Ask for a token with it (manage.py token scopes, or the admin)." in body["detail"]


# --- what the destination says, and what changed, before a replay ---------------------------------


@pytest.fixture
def acted_and_lost(workspace, standin, time_machine, settings):
    """A send-notice the destination holds, whose answer was lost and whose lookup then failed:
    needs review, and a try may have reached the destination."""
    from ledger.intake.submit import submit_event
    from reconciliation.reconcile import reconcile_operation

    settings.OPSCONSOLE_RECONCILE_GIVE_UP_SECONDS = 0
    standin.fail_next({"kind": "drop_after_commit"})
    operation = submit_event(workspace=workspace, raw=external_event(), source="api").operation
    process_due_operations()
    operation.refresh_from_db()
    time_machine.move_to(operation.next_attempt_at)
    standin.fail_next_lookup({"kind": "status", "status": 503})
    assert reconcile_operation(operation) == "gave_up"
    operation.refresh_from_db()
    assert operation.state == "needs_review"
    return operation


def test_a_replay_the_destination_cannot_vouch_for_needs_force_unknown(caller, reviewer, acted_and_lost, standin):
    standin.fail_next_lookup({"kind": "status", "status": 503}, {"kind": "status", "status": 503})
    operator = caller("operator")

    risky = operator.post(path(acted_and_lost, "replay"), {"reason": "checked"})
    forced = operator.post(
        path(acted_and_lost, "replay"), {"reason": "vendor portal shows nothing", "force_unknown": True}
    )

    body = refused(risky, 409, "duplicate_risk")
    assert "cannot tell" in body["detail"]
    assert body["state"] == "needs_review"
    assert forced.status_code == 200, forced.content
    assert "accepting the duplicate risk" in forced.json()["message"]
    assert AuditEvent.objects.filter(kind="replay_forced", actor="operator").count() == 1


def test_a_replay_finds_the_record_at_the_destination_and_sends_nothing(caller, reviewer, acted_and_lost, standin):
    response = caller("operator").post(path(acted_and_lost, "replay"), {"reason": "try again"})

    assert response.status_code == 200, response.content
    assert (response.json()["status"], response.json()["operation"]["state"]) == ("succeeded", "succeeded")
    assert len(standin.records(reference=acted_and_lost.key)) == 1


def test_a_replay_under_a_changed_configuration_needs_it_accepted(caller, reviewer, refused_notice, settings):
    settings.OPSCONSOLE_HTTP_TIMEOUT_SECONDS = 3.0
    operator = caller("operator")

    unconfirmed = operator.post(path(refused_notice, "replay"), {"reason": "fixed"})
    confirmed = operator.post(path(refused_notice, "replay"), {"reason": "fixed", "accept_config_change": True})

    body = refused(unconfirmed, 409, "config_changed")
    assert body["changes"] == ["timeout_seconds: 2.0 -> 3.0"]
    assert confirmed.status_code == 200, confirmed.content


# --- conflicts ------------------------------------------------------------------------------------


def conflict_of(machine) -> int:
    machine.post("/api/v1/events", event())
    answer = machine.post("/api/v1/events", event("d-2", title="Changed without a new version"))
    assert answer.status_code == 409
    return answer.json()["conflict_id"]


def test_it_applies_a_conflict_and_the_person_becomes_a_contributor(caller, reviewer, machine):
    pk = conflict_of(machine)

    response = caller("operator").post(f"/api/v1/conflicts/{pk}/apply", {"reason": "the new title is meant"})

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["status"], body["conflict"]["status"]) == ("applied", "applied")
    assert body["operation"]["payload"]["title"] == "Changed without a new version"
    assert Contribution.objects.filter(user=reviewer, kind="changed").exists()


def test_applying_a_side_of_a_refunds_amount_needs_seeing_it(caller, reviewer, approver, person, machine, refund):
    """An operator, and a machine's token, may dismiss it, not apply it: they see the amounts
    masked. An approver who sees them may (and, four eyes, then does not approve it)."""
    changed = machine.post("/api/v1/events", {"action": "issue-refund", "data": REFUND | {"amount_cents": 4501}})
    pk = changed.json()["conflict_id"]
    person("carol", "approver")

    by_operator = caller("operator").post(f"/api/v1/conflicts/{pk}/apply", {"reason": "the new one"})
    by_machine = machine.post(f"/api/v1/conflicts/{pk}/apply", {"reason": "the new one"})

    detail = refused(by_operator, 403, "role")["detail"]
    assert "differs in Amount, which operator may not see: only approvers and admins" in detail
    refused(by_machine, 403, "role")
    assert Operation.objects.get().payload["amount_cents"] == 4500
    assert (
        not AuditEvent.objects.filter(kind__startswith="conflict_")
        .exclude(kind="conflict_detected")
        .exclude(kind="conflict_held")
        .exists()
    )
    applied = caller("carol").post(f"/api/v1/conflicts/{pk}/apply", {"reason": "the corrected amount"})
    assert applied.status_code == 200, applied.content
    assert Operation.objects.get().payload["amount_cents"] == 4501


def test_a_conflict_is_decided_once_by_someone_who_may_review(caller, reviewer, approver, machine):
    pk = conflict_of(machine)

    by_approver = caller("approver").post(f"/api/v1/conflicts/{pk}/dismiss", {"reason": "no"})
    dismissed = caller("operator").post(f"/api/v1/conflicts/{pk}/dismiss", {"reason": "sent by mistake"})
    again = caller("operator").post(f"/api/v1/conflicts/{pk}/apply", {"reason": "after all"})
    elsewhere = caller("operator").post("/api/v1/conflicts/999999/apply", {"reason": "x"})

    refused(by_approver, 403, "role")
    assert dismissed.json()["status"] == "dismissed"
    assert "already dismissed" in refused(again, 409, "wrong_state")["detail"]
    assert elsewhere.json() == {"status": "not_found", "detail": "No conflict with this id in this workspace."}
