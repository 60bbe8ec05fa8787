"""People see and act only within their workspaces: another workspace's operations, conflicts,
audit events and switches do not exist for them (404, or absent from lists), and a role acts only
where it is held. A superuser sees everything."""

import importlib
from io import StringIO

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import CommandError, call_command
from django.urls import reverse

from ledger.core import accounts
from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, Conflict, Membership, Operation
from ledger.people import pause
from tests.ledger.conftest import submit

OPERATION_ACTIONS = ["replay", "resolve", "look_up", "cancel", "approve", "reject"]
CONFLICT_ACTIONS = ["apply_conflict", "dismiss_conflict"]
FORM = {"reason": "because", "note": "because", "external_id": "rec-1", "fingerprint": "x"}


@pytest.fixture
def other(db):
    """Workspace B, with an operation needing review, one awaiting approval, an open conflict,
    a pause switch and its own audit trail."""
    workspace, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    return workspace


@pytest.fixture
def theirs(other, scripted_action, noted_action):
    action = scripted_action(external=True)
    needing_review = submit(other, action.name, request_id="B-1")
    Operation.objects.filter(pk=needing_review.pk).update(state="needs_review")
    awaiting = submit(other, scripted_action(consequential=True).name, request_id="B-2")
    data = {"request_id": "B-3", "version": 1, "note": "one", "secret": "s"}
    submit_event(workspace=other, source="api", raw={"action": noted_action.name, "data": data})
    conflict = submit_event(
        workspace=other, source="api", raw={"action": noted_action.name, "data": data | {"note": "two"}}
    ).conflict
    pause.set_paused(paused=True, actor="b-admin", reason="their incident", workspace=other)
    return {"needs_review": needing_review, "awaiting": awaiting, "conflict": conflict}


def action_urls(theirs) -> dict[str, str]:
    urls = {
        name: reverse(
            f"console:{name}", args=[theirs["awaiting" if name in ("approve", "reject") else "needs_review"].pk]
        )
        for name in OPERATION_ACTIONS
    }
    urls |= {name: reverse(f"console:{name}", args=[theirs["conflict"].pk]) for name in CONFLICT_ACTIONS}
    return urls


def snapshot():
    return (
        list(Operation.objects.order_by("pk").values_list("pk", "state", "payload")),
        list(Conflict.objects.order_by("pk").values_list("pk", "status")),
        AuditEvent.objects.count(),
    )


@pytest.mark.parametrize("role", ["viewer", "operator", "approver", "admin"])
def test_it_hides_another_workspaces_operations_whatever_the_role_here(client, login, role, theirs):
    login(role)

    assert client.get(f"/console/operations/{theirs['needs_review'].pk}/").status_code == 404
    for page in ["/console/", "/console/?state=all", "/console/audit/", "/console/controls/"]:
        html = client.get(page).content.decode()
        assert "B-1" not in html, page
        assert "other" not in html, page
        assert "their incident" not in html, page


@pytest.mark.parametrize("role", ["operator", "approver", "admin"])
def test_it_answers_404_to_every_action_on_another_workspace(client, login, role, theirs):
    login(role)
    before = snapshot()

    for name, url in action_urls(theirs).items():
        assert client.post(url, FORM).status_code == 404, name

    assert snapshot() == before


def test_it_lets_a_viewer_see_but_not_act(client, login, person, other, theirs):
    viewer = person("b-viewer", "viewer", workspaces=("other",))
    client.force_login(viewer)
    before = snapshot()

    assert client.get(f"/console/operations/{theirs['needs_review'].pk}/").status_code == 200
    for name, url in action_urls(theirs).items():
        assert client.post(url, FORM).status_code == 403, name
    assert client.post("/console/controls/pause/", {"workspace": other.pk, "reason": "x"}).status_code == 403
    assert client.post("/console/controls/resume/", {"workspace": other.pk}).status_code == 403
    assert snapshot() == before


def test_it_acts_where_the_role_is_held(client, person, other, theirs):
    operator = person("b-operator", "operator", workspaces=("other",))
    client.force_login(operator)

    client.post(reverse("console:cancel", args=[theirs["needs_review"].pk]), {"reason": "not needed"})
    client.post("/console/controls/resume/", {"workspace": other.pk, "action": ""})

    assert Operation.objects.get(pk=theirs["needs_review"].pk).state == "cancelled"
    assert not other.controls.filter(paused=True).exists()


def test_it_shows_everything_to_a_superuser(client, admin_user, theirs, make_operation):
    ours = make_operation("needs_review", request_id="A-1")
    client.force_login(admin_user)

    queue = client.get("/console/?state=all").content.decode()

    assert ours.key in queue
    assert theirs["needs_review"].key in queue
    assert client.get(f"/console/operations/{theirs['needs_review'].pk}/").status_code == 200


def test_it_refuses_a_command_as_a_person_of_another_workspace(theirs, person):
    person("a-admin", "admin")  # admin of demo, nothing in other

    for command, args in [
        ("replay", ["--reason", "x"]),
        ("cancel", ["--reason", "x"]),
        ("resolve", ["--reason", "x", "--external-id", "r-1"]),
    ]:
        with pytest.raises(
            CommandError, match="a-admin may not replay, resolve, cancel or decide conflicts in workspace other."
        ):
            call_command(
                command, theirs["needs_review"].key, "--workspace", "other", "--as", "a-admin", *args, stdout=StringIO()
            )
    with pytest.raises(CommandError, match="a-admin may not approve or reject in workspace other."):
        call_command("approve", theirs["awaiting"].key, "--workspace", "other", "--as", "a-admin", stdout=StringIO())
    with pytest.raises(CommandError, match="a-admin is not a member of workspace other"):
        call_command("submit", "-", "--workspace", "other", "--as", "a-admin", stdout=StringIO())
    with pytest.raises(CommandError, match="a-admin is not a member of workspace other"):
        call_command("token", "issue", "other", "--user", "a-admin", stdout=StringIO())


def test_it_manages_members_from_the_command_line(other, person):
    alice = person("alice")
    out = StringIO()

    call_command("member", "add", "other", "alice", "--role", "viewer", stdout=out)
    call_command("member", "add", "other", "alice", "--role", "approver", stdout=out)
    call_command("member", "list", "other", stdout=out)
    call_command("member", "remove", "other", "alice", stdout=out)

    assert out.getvalue().splitlines() == [
        "alice is viewer of other.",
        "alice is approver of other.",
        "other  alice                approver",
        "alice is no longer a member of other; no API tokens to revoke.",
    ]
    assert not Membership.objects.filter(user=alice).exists()
    assert list(
        AuditEvent.objects.filter(workspace=other, kind__startswith="member_").values_list("kind", "message")
    ) == [
        ("member_added", "alice: viewer"),
        ("member_role_changed", "alice: viewer -> approver"),
        ("member_removed", "alice (0 API tokens revoked)"),
    ]
    with pytest.raises(CommandError, match="alice is not a member of workspace other."):
        call_command("member", "remove", "other", "alice", stdout=StringIO())


def test_it_shows_a_staff_member_only_their_workspaces_in_the_admin(client, person, theirs, make_operation):
    ours = make_operation("needs_review", request_id="A-1")
    staff = person("a-staff", "viewer")
    staff.is_staff = True
    staff.save()
    client.force_login(staff)

    listing = client.get("/admin/ledger/operation/").content.decode()
    change = client.get(f"/admin/ledger/operation/{theirs['needs_review'].pk}/change/")

    assert ours.key in listing
    assert theirs["needs_review"].key not in listing
    # The workspace filter offers their own workspaces only (it used to list every workspace).
    assert f"?workspace__id__exact={theirs['needs_review'].workspace_id}" not in listing
    assert change.status_code == 302  # the admin's "does not exist": back to the index
    assert client.get("/admin/ledger/membership/").status_code == 403  # superusers manage members


def test_it_turns_the_old_permissions_into_roles(person, other):
    """The data migration: whoever held the console permissions keeps the same powers, in every
    workspace, as the role that grants them."""
    from django.apps import apps

    migration = importlib.import_module("ledger.migrations.0006_memberships")
    operation_type = ContentType.objects.get(app_label="ledger", model="operation")
    grants = {}
    for codename in ["review_operation", "approve_operation", "pause_processing", "view_operation"]:
        grants[codename] = Permission.objects.get_or_create(
            content_type=operation_type, codename=codename, defaults={"name": codename}
        )[0]
    people = {
        "both": ["review_operation", "approve_operation"],
        "ops": ["review_operation", "pause_processing"],
        "signer": ["approve_operation"],
        "reader": ["view_operation"],
    }
    for username, codenames in people.items():
        person(username).user_permissions.add(*(grants[c] for c in codenames))

    migration.memberships_from_permissions(apps, None)

    roles = set(Membership.objects.filter(workspace=other).values_list("user__username", "role"))
    assert roles == {("both", "admin"), ("ops", "operator"), ("signer", "approver"), ("reader", "viewer")}
