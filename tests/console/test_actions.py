"""Each decision is a POST that checks its permission, calls the ledger's service and reports back on
the operation page; a missing reason or a refusal by the service changes nothing."""

import pytest
from django.contrib.messages import get_messages

from ledger.models import AuditEvent, Conflict, Operation
from tests.ledger.conftest import submit


def messages_of(response) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]


def post(client, url, data):
    response = client.post(url, data)
    assert response.status_code == 302
    return response


@pytest.fixture
def awaiting_approval(workspace, scripted_action):
    return submit(workspace, scripted_action(consequential=True).name, request_id="R-5")


def test_it_replays_an_operation_that_needs_review(client, login, needing_review):
    login("operator")

    response = post(client, f"/console/operations/{needing_review.pk}/replay/", {"reason": "owner created"})

    assert response.url == f"/console/operations/{needing_review.pk}/"
    assert messages_of(response) == [("success", f"Replayed {needing_review.key}.")]
    needing_review.refresh_from_db()
    assert needing_review.state == "pending"
    event = AuditEvent.objects.get(kind="replayed")
    assert (event.actor, event.message) == ("operator", "replay: owner created after 1 attempt(s)")
    page = client.get(response.url).content.decode()
    assert f'role="status">Replayed {needing_review.key}.</p>' in page


def test_it_cancels_an_operation(client, login, needing_review):
    login("operator")

    response = post(client, f"/console/operations/{needing_review.pk}/cancel/", {"reason": "not needed"})

    assert messages_of(response) == [("success", f"Cancelled {needing_review.key}.")]
    needing_review.refresh_from_db()
    assert needing_review.state == "cancelled"
    assert AuditEvent.objects.get(kind="cancelled").message == "cancel: not needed"


def test_it_approves_an_operation_for_the_payload_shown(client, login, awaiting_approval):
    login("approver")

    response = post(
        client,
        f"/console/operations/{awaiting_approval.pk}/approve/",
        {"note": "", "fingerprint": awaiting_approval.fingerprint},
    )

    assert messages_of(response) == [
        ("success", f"Approved {awaiting_approval.key}. Nothing else awaits your approval.")
    ]
    awaiting_approval.refresh_from_db()
    assert awaiting_approval.state == "pending"
    assert awaiting_approval.approvals.get().approver == "approver"


def test_it_rejects_an_operation_with_a_note(client, login, awaiting_approval):
    login("approver")

    response = post(
        client,
        f"/console/operations/{awaiting_approval.pk}/reject/",
        {"note": "wrong customer", "fingerprint": awaiting_approval.fingerprint},
    )

    assert messages_of(response) == [
        ("success", f"Rejected {awaiting_approval.key}. Nothing else awaits your approval.")
    ]
    awaiting_approval.refresh_from_db()
    assert awaiting_approval.state == "rejected"


def test_it_applies_the_incoming_payload_of_a_conflict(client, login, noted):
    login("operator")
    operation = noted(note="one").operation
    conflict = noted(note="two").conflict

    response = post(client, f"/console/conflicts/{conflict.pk}/apply/", {"reason": "the second is right"})

    assert response.url == f"/console/operations/{operation.pk}/"
    assert messages_of(response) == [
        ("success", f"Applied the incoming payload of conflict {conflict.pk} to {operation.key}.")
    ]
    operation.refresh_from_db()
    conflict.refresh_from_db()
    assert (operation.payload["note"], conflict.status, conflict.decided_by) == ("two", "applied", "operator")


def test_it_dismisses_a_conflict(client, login, noted):
    login("operator")
    operation = noted(note="one").operation
    conflict = noted(note="two").conflict

    response = post(client, f"/console/conflicts/{conflict.pk}/dismiss/", {"reason": "stale retry"})

    assert messages_of(response) == [("success", f"Dismissed conflict {conflict.pk} on {operation.key}.")]
    operation.refresh_from_db()
    conflict.refresh_from_db()
    assert (operation.payload["note"], conflict.status) == ("one", "dismissed")


def snapshot():
    """Everything a decision could change."""
    return (
        list(Operation.objects.order_by("pk").values_list("pk", "state", "payload")),
        list(Conflict.objects.order_by("pk").values_list("pk", "status")),
        AuditEvent.objects.count(),
    )


@pytest.fixture
def targets(needing_review, awaiting_approval, noted):
    """Each action's URL, the permission role that may use it, and a valid form."""
    noted(note="one")
    conflict = noted(note="two").conflict
    reason = {"reason": "because"}
    decision = {"note": "because", "fingerprint": awaiting_approval.fingerprint}
    return {
        "replay": (f"/console/operations/{needing_review.pk}/replay/", "operator", reason),
        "resolve": (f"/console/operations/{needing_review.pk}/resolve/", "operator", reason | {"external_id": "rec-1"}),
        "look_up": (f"/console/operations/{needing_review.pk}/look-up/", "operator", {}),
        "cancel": (f"/console/operations/{needing_review.pk}/cancel/", "operator", reason),
        "approve": (f"/console/operations/{awaiting_approval.pk}/approve/", "approver", decision),
        "reject": (f"/console/operations/{awaiting_approval.pk}/reject/", "approver", decision),
        "apply": (f"/console/conflicts/{conflict.pk}/apply/", "operator", reason),
        "dismiss": (f"/console/conflicts/{conflict.pk}/dismiss/", "operator", reason),
    }


ACTIONS = ["replay", "resolve", "look_up", "cancel", "approve", "reject", "apply", "dismiss"]


@pytest.mark.parametrize("name", ACTIONS)
def test_it_refuses_a_decision_without_its_permission(client, login, targets, name):
    url, role, form = targets[name]
    login("approver" if role == "operator" else "operator")
    before = snapshot()

    assert client.post(url, form).status_code == 403

    assert snapshot() == before


@pytest.mark.parametrize("name", [name for name in ACTIONS if name != "approve"])  # approve: its confirmation
def test_it_answers_a_get_with_method_not_allowed(client, login, targets, name):
    url, role, _ = targets[name]
    login(role)

    assert client.get(url).status_code == 405


@pytest.mark.parametrize("name", ["replay", "resolve", "cancel", "reject", "apply", "dismiss"])
def test_it_changes_nothing_without_a_reason(client, login, targets, name):
    url, role, form = targets[name]
    login(role)
    before = snapshot()

    response = post(client, url, {k: "  " if k in ("reason", "note") else v for k, v in form.items()})

    [(level, message)] = messages_of(response)
    assert level == "error"
    assert "Reason is required" in message or "Say why the operation is rejected" in message
    assert snapshot() == before
    assert 'role="alert"' in client.get(response.url).content.decode()


def test_it_reports_a_replay_the_service_refuses(client, login, make_operation):
    login("operator")
    succeeded = make_operation("succeeded")
    before = snapshot()

    response = post(client, f"/console/operations/{succeeded.pk}/replay/", {"reason": "again"})

    assert messages_of(response) == [
        ("error", f"Only an operation that needs review can be replayed; {succeeded.key} is succeeded.")
    ]
    assert snapshot() == before


def test_it_reports_a_cancel_the_service_refuses(client, login, make_operation):
    login("operator")
    succeeded = make_operation("succeeded")
    before = snapshot()

    [(level, message)] = messages_of(post(client, f"/console/operations/{succeeded.pk}/cancel/", {"reason": "x"}))

    assert level == "error"
    assert "only needs_review, pending, retrying operations can be cancelled" in message
    assert snapshot() == before


def test_it_refuses_an_approval_for_a_payload_that_changed(client, login, awaiting_approval):
    login("approver")
    before = snapshot()

    response = post(
        client,
        f"/console/operations/{awaiting_approval.pk}/approve/",
        {"note": "", "fingerprint": "not-the-shown-payload"},
    )

    assert messages_of(response) == [
        ("error", f"The payload of {awaiting_approval.key} changed since it was shown; look at it again.")
    ]
    assert snapshot() == before


def test_it_refuses_to_decide_a_conflict_twice(client, login, noted):
    login("operator")
    noted(note="one")
    conflict = noted(note="two").conflict
    client.get(post(client, f"/console/conflicts/{conflict.pk}/dismiss/", {"reason": "stale"}).url)
    before = snapshot()

    response = post(client, f"/console/conflicts/{conflict.pk}/apply/", {"reason": "changed my mind"})

    [(level, message)] = messages_of(response)
    assert level == "error"
    assert "already" in message
    assert snapshot() == before


def test_it_lets_a_superuser_decide(client, admin_user, needing_review):
    client.force_login(admin_user)

    response = post(client, f"/console/operations/{needing_review.pk}/cancel/", {"reason": "cleanup"})

    assert messages_of(response) == [("success", f"Cancelled {needing_review.key}.")]


def test_the_replay_form_shows_a_configuration_change_and_needs_it_confirmed(
    client, login, workspace, action, needing_review
):
    from datetime import timedelta

    from ledger.core import policies
    from ledger.models import Attempt

    assert Attempt.objects.filter(operation=needing_review, config_version__isnull=False).exists()
    policies.set_policy(workspace=workspace, action=action.name, actor="test", key_retention=timedelta(days=400))
    login("operator")
    url = f"/console/operations/{needing_review.pk}/"

    page = client.get(url).content.decode()
    assert "changed since this operation last ran" in page
    assert "<code>policy.key_retention</code>" in page
    assert "<code>400d</code>" in page

    refused = post(client, f"{url}replay/", {"reason": "owner created"})
    [(level, message)] = messages_of(refused)
    assert level == "error"
    assert 'policy.key_retention: "90d" -> "400d"' in message
    assert Operation.objects.get(pk=needing_review.pk).state == "needs_review"

    post(client, f"{url}replay/", {"reason": "owner created", "accept_config_change": "on"})
    assert Operation.objects.get(pk=needing_review.pk).state == "pending"
