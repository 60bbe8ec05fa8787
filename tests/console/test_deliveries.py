"""The deliveries page: the arrivals that did not become work, newest first, with the errors they
were refused with (never the values sent), filtered by outcome, workspace and source, within the
person's workspaces only."""

import json

import pytest
from django.utils import timezone

from ledger.core import accounts
from ledger.intake.submit import submit_event
from ledger.models import Delivery
from tests.conftest import event


@pytest.fixture
def other(db):
    workspace, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    return workspace


@pytest.fixture
def refused(workspace, api):
    """One arrival of each refused kind, through the API as a sender makes them, and one accepted."""
    invalid = api.post(
        "/api/v1/events",
        {
            "action": "prepare-brief",
            "delivery_id": "d-bad",
            "data": {"request_id": "R-1", "version": "three", "title": "Secret plan", "owner": "mallory"},
        },
    )
    malformed = api.post("/api/v1/events", "{not json")
    accepted = api.post("/api/v1/events", event(delivery_id="d-ok"))
    conflict = api.post("/api/v1/events", event(delivery_id="d-changed", title="Another title"))
    stale = api.post(
        "/api/v1/events",
        event(delivery_id="d-old", request_id="R-9")
        | {"occurred_at": (timezone.now() - timezone.timedelta(days=400)).isoformat()},
    )
    assert [r.status_code for r in (invalid, malformed, accepted, conflict, stale)] == [422, 400, 201, 409, 409]
    return accepted.json()


def rows(response) -> list[tuple[str, str]]:
    return [(d.outcome, d.sender_delivery_id) for d in response.context["page"].object_list]


def test_it_lists_the_refused_arrivals_newest_first(client, login, refused):
    login("viewer")
    response = client.get("/console/deliveries/")
    assert response.status_code == 200
    assert rows(response) == [("stale", "d-old"), ("conflict", "d-changed"), ("invalid", ""), ("invalid", "d-bad")]


def test_it_shows_why_each_was_refused_but_never_what_was_sent(client, login, refused):
    login("viewer")
    html = client.get("/console/deliveries/").content.decode()
    assert "<code>data.version</code>: Input should be a valid integer" in html
    assert "malformed JSON" in html
    assert "differs from the one its key holds in <code>title</code>" in html
    assert "<code>occurred_at</code>: occurred more than" in html
    for value in ("three", "Secret plan", "mallory", "Another title"):
        assert value not in html, value


def test_it_links_an_arrival_to_its_operation(client, login, refused):
    login("viewer")
    html = client.get("/console/deliveries/", {"outcome": "conflict"}).content.decode()
    assert f'<a href="/console/operations/{refused["operation"]["id"]}/">demo:R-42:v3:prepare-brief</a>' in html


def test_it_filters_by_outcome_workspace_and_source(client, login, refused, other, workspace):
    login("viewer")
    submit_event(workspace=workspace, source="cli", raw={"action": "no-such-action", "data": {}})
    assert rows(client.get("/console/deliveries/", {"outcome": "invalid"})) == [
        ("invalid", ""),
        ("invalid", ""),
        ("invalid", "d-bad"),
    ]
    assert rows(client.get("/console/deliveries/", {"source": "cli"})) == [("invalid", "")]
    assert len(rows(client.get("/console/deliveries/", {"workspace": workspace.pk}))) == 5


def test_it_refuses_a_filter_it_does_not_know_saying_so(client, login, refused, other):
    login("viewer")
    response = client.get("/console/deliveries/", {"outcome": "accepted", "workspace": other.pk})
    assert response.status_code == 200
    html = response.content.decode()
    assert html.count("Select a valid choice.") == 2
    assert all(outcome != "accepted" for outcome, _ in rows(response))


def test_it_never_lists_an_accepted_or_duplicate_arrival(client, login, refused, api):
    login("viewer")
    api.post("/api/v1/events", event(delivery_id="d-ok-again"))  # a duplicate
    assert Delivery.objects.filter(outcome__in=["accepted", "duplicate"]).count() == 2
    shown = {outcome for outcome, _ in rows(client.get("/console/deliveries/"))}
    assert shown == {"invalid", "conflict", "stale"}


def test_it_shows_only_the_persons_workspaces(client, login, refused, other, person):
    submit_event(workspace=other, source="api", raw={"action": "prepare-brief", "delivery_id": "d-theirs", "data": {}})
    login("viewer")
    assert "d-theirs" not in json.dumps(rows(client.get("/console/deliveries/")))
    client.force_login(person("boss", "viewer", workspaces=["other"]))
    assert rows(client.get("/console/deliveries/")) == [("invalid", "d-theirs")]


def test_it_pages_through_many_with_a_cursor(client, login, workspace):
    login("viewer")
    for number in range(55):
        submit_event(
            workspace=workspace, source="api", raw={"action": "prepare-brief", "delivery_id": f"d-{number}", "data": {}}
        )
    first = client.get("/console/deliveries/")
    assert len(first.context["page"]) == 50
    assert first.context["page"].older is not None
    second = client.get("/console/deliveries/", {"older": str(first.context["page"].older)})
    assert [d for _, d in rows(second)] == [f"d-{n}" for n in range(4, -1, -1)]


def test_it_needs_a_login_and_a_workspace(client, login):
    response = client.get("/console/deliveries/")
    assert (response.status_code, response.url) == (302, "/accounts/login/?next=/console/deliveries/")
    login("nobody")
    assert client.get("/console/deliveries/").status_code == 403


def test_it_is_in_the_navigation(client, login):
    login("viewer")
    html = client.get("/console/deliveries/").content.decode()
    assert '<a href="/console/deliveries/" aria-current="page">Deliveries</a>' in html


def test_it_lists_the_webhooks_no_rule_mapped_when_asked(client, login, workspace):
    """Not among the refused (nothing was wrong with them), but where a person looks for them."""
    Delivery.objects.create(
        workspace=workspace,
        source="webhook",
        outcome="ignored",
        sender_delivery_id="evt_1",
        submitted_by="source:billing",
    )
    login("viewer")

    default = client.get("/console/deliveries/").content.decode()
    ignored = client.get("/console/deliveries/?outcome=ignored&source=webhook").content.decode()

    assert "evt_1" not in default
    assert "evt_1" in ignored
