"""Held work in plain sight: what a pause holds is in the queue (state "held", with the switch and
its reason), on the operation page, counted per switch on Controls, and aged apart from due work."""

from datetime import timedelta

from django.utils import timezone

from ledger.core import accounts
from ledger.people import pause
from tests.ledger.conftest import submit_brief


def test_the_queue_lists_what_a_pause_holds_with_its_switch_and_reason(client, login, workspace):
    held = submit_brief(workspace, request_id="R-1")
    pause.set_paused(paused=True, reason="vendor outage", workspace=workspace, action="prepare-brief", actor="alice")
    login("viewer")

    response = client.get("/console/", {"state": "held"})

    assert [op.pk for op in response.context["page"].object_list] == [held.pk]
    page = response.content.decode()
    assert "workspace demo, action prepare-brief: vendor outage" in page
    assert "Held by a pause: oldest due" in client.get("/console/").content.decode()


def test_nothing_held_says_so(client, login, workspace):
    submit_brief(workspace)
    login("viewer")

    response = client.get("/console/", {"state": "held"})

    assert "No pause holds any work." in response.content.decode()
    assert "Held by a pause" not in client.get("/console/").content.decode()


def test_the_operation_page_says_it_is_held_and_by_which_switch(client, login, workspace):
    operation = submit_brief(workspace)
    pause.set_paused(paused=True, reason="incident 42", workspace=workspace, actor="alice")
    login("viewer")

    page = client.get(f"/console/operations/{operation.pk}/").content.decode()
    assert "Held: the pause switch of workspace demo holds this operation" in page
    assert "incident 42; by alice" in page

    pause.set_paused(paused=False, reason="fixed", workspace=workspace, actor="alice")
    assert "Held:" not in client.get(f"/console/operations/{operation.pk}/").content.decode()


def test_controls_count_what_each_switch_holds(client, login, workspace):
    submit_brief(workspace, request_id="R-1")
    submit_brief(workspace, request_id="R-2")
    pause.set_paused(paused=True, reason="one", workspace=workspace, action="prepare-brief", actor="alice")
    pause.set_paused(paused=True, reason="two", workspace=workspace, action="file-ticket", actor="alice")
    login("operator")

    rows = {row["control"].reason: row["holds"] for row in client.get("/console/controls/").context["switches"]}

    assert rows == {"one": 2, "two": 0}


def test_held_work_is_aged_apart_from_due_work(client, login, workspace, time_machine):
    start = timezone.now()
    time_machine.move_to(start, tick=False)
    submit_brief(workspace)
    pause.set_paused(paused=True, reason="incident", workspace=workspace, actor="alice")
    time_machine.move_to(start + timedelta(seconds=90), tick=False)
    login("viewer")

    health = client.get("/console/").context["health"]

    assert (health["oldest_due_seconds"], health["oldest_held_seconds"]) == (None, 90)


def test_held_work_of_another_workspace_stays_out_of_sight(client, login, workspace):
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    submit_brief(other)
    pause.set_paused(paused=True, reason="theirs", workspace=other, actor="root")
    login("viewer")

    assert list(client.get("/console/", {"state": "held"}).context["page"].object_list) == []


def test_the_health_line_ages_only_the_persons_own_workspaces(client, login, workspace, time_machine):
    """Another workspace's due and held work is not this person's to see, nor to age."""
    start = timezone.now()
    time_machine.move_to(start, tick=False)
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    submit_brief(other, request_id="R-due")
    third, _ = accounts.create_workspace(slug="third", approved_owners=["ops"], actor="test")
    submit_brief(third, request_id="R-held")
    pause.set_paused(paused=True, reason="theirs", workspace=third, actor="root")
    time_machine.move_to(start + timedelta(seconds=90), tick=False)
    login("viewer")

    health = client.get("/console/").context["health"]

    assert (health["oldest_due_seconds"], health["oldest_held_seconds"]) == (None, None)
