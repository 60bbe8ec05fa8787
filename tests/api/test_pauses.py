"""Pauses over the API: listed, pulled for the workspace, an action or a destination, and released;
a machine's token with the operate scope may pause its own workspace (a flow reacting to a
vendor's incident), a person's needs the pause role, and a switch beyond the workspace is a
superuser's."""

import pytest

from ledger.models import AuditEvent, Control
from ledger.people.pause import set_paused


@pytest.fixture
def machine(caller):
    return caller()


def refused(response, status: int, reason: str) -> dict:
    assert response.status_code == status, response.content
    assert response.json()["reason"] == reason, response.json()
    return response.json()


def test_a_machine_pauses_a_destination_and_resumes_it(machine, workspace):
    pulled = machine.post(
        "/api/v1/pauses", {"scope": "destination", "destination": "prepare-brief", "reason": "incident 12"}
    )

    assert pulled.status_code == 201, pulled.content
    (pause,) = pulled.json()["pauses"]
    assert (pause["scope"], pause["workspace"], pause["action"], pause["reason"]) == (
        "action",
        "demo",
        "prepare-brief",
        "incident 12",
    )
    assert machine.get("/api/v1/pauses").json()["pauses"] == [pause]
    control = Control.objects.get()
    assert (control.paused, control.changed_by) == (True, f"token:{machine.token[:8]}")

    resumed = machine.delete(f"/api/v1/pauses/{pause['id']}")

    assert resumed.status_code == 200, resumed.content
    assert resumed.json()["message"] == "Resumed workspace demo, action prepare-brief."
    assert machine.get("/api/v1/pauses").json()["pauses"] == []
    assert list(AuditEvent.objects.filter(kind__in=["paused", "resumed"]).values_list("kind", flat=True)) == [
        "paused",
        "resumed",
    ]


def test_a_pause_of_every_action_calling_a_destination_pulls_one_switch_each(machine, workspace):
    from ledger.reads.work_lists import actions_by_destination

    destination, actions = next(
        (name, actions) for name, actions in actions_by_destination().items() if len(actions) > 1
    )

    pulled = machine.post("/api/v1/pauses", {"scope": "destination", "destination": destination, "reason": "down"})

    assert pulled.status_code == 201, pulled.content
    assert sorted(pause["action"] for pause in pulled.json()["pauses"]) == sorted(actions)


def test_it_pauses_the_workspace_and_an_action(machine, workspace):
    whole = machine.post("/api/v1/pauses", {"scope": "workspace", "reason": "maintenance"})
    one = machine.post("/api/v1/pauses", {"scope": "action", "action": "send-notice", "reason": "template fix"})

    assert [p["scope"] for p in whole.json()["pauses"]] == ["workspace"]
    assert [(p["scope"], p["action"]) for p in one.json()["pauses"]] == [("action", "send-notice")]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"scope": "action", "reason": "x"}, "action"),
        ({"scope": "action", "action": "nope", "reason": "x"}, "action"),
        ({"scope": "destination", "destination": "nowhere", "reason": "x"}, "destination"),
        ({"scope": "workspace", "action": "send-notice", "reason": "x"}, "scope"),
        ({"scope": "workspace", "reason": ""}, "reason"),
        ({"scope": "everything", "reason": "x"}, "scope"),
    ],
)
def test_it_refuses_a_pause_it_cannot_pull_422_and_pulls_nothing(machine, body, field):
    body_out = refused(machine.post("/api/v1/pauses", body), 422, "invalid_input")

    assert [error["field"] for error in body_out["errors"]] == [field]
    assert not Control.objects.exists()


def test_a_person_needs_the_pause_role(caller, approver, reviewer):
    refused(caller("approver").post("/api/v1/pauses", {"scope": "workspace", "reason": "x"}), 403, "role")

    assert caller("operator").post("/api/v1/pauses", {"scope": "workspace", "reason": "x"}).status_code == 201


def test_a_switch_beyond_the_workspace_is_listed_but_only_a_superuser_releases_it(
    machine, caller, django_user_model, workspace
):
    everything = set_paused(paused=True, actor="root", reason="global freeze")
    django_user_model.objects.create_superuser("root", password="pw")

    listed = machine.get("/api/v1/pauses").json()["pauses"]
    by_machine = machine.delete(f"/api/v1/pauses/{everything.pk}")
    by_root = caller("root").delete(f"/api/v1/pauses/{everything.pk}")

    assert [(p["scope"], p["workspace"]) for p in listed] == [("global", None)]
    refused(by_machine, 403, "beyond_workspace")
    assert by_root.status_code == 200, by_root.content


def test_another_workspaces_pause_is_404(machine, workspace):
    from ledger.core import accounts

    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    theirs = set_paused(paused=True, actor="x", reason="theirs", workspace=other)

    assert machine.get("/api/v1/pauses").json()["pauses"] == []
    assert machine.delete(f"/api/v1/pauses/{theirs.pk}").status_code == 404
    assert machine.delete("/api/v1/pauses/999999999999").status_code == 404


def test_reading_pauses_needs_read_and_pulling_them_operate(caller, workspace):
    refused(caller(scopes=["events"]).get("/api/v1/pauses"), 403, "missing_scope")
    refused(caller(scopes=["read"]).post("/api/v1/pauses", {"scope": "workspace", "reason": "x"}), 403, "missing_scope")
