"""The top bar's Find box: one operation found lands on its page, several are listed with the id
each matched, none says what was looked in; what cannot be an id is refused, saying why."""

import pytest
from django.utils import timezone

from ledger.core import accounts
from ledger.intake.submit import record_blocked_delivery
from ledger.models import Attempt
from tests.ledger.conftest import submit_brief


@pytest.fixture
def other(db):
    workspace, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    return workspace


def test_every_console_page_has_the_find_box(client, login, make_operation):
    login("viewer")
    for path in [
        "/console/",
        "/console/audit/",
        "/console/controls/",
        "/console/deliveries/",
        f"/console/operations/{make_operation().pk}/",
    ]:
        html = client.get(path).content.decode()
        assert 'action="/console/find/"' in html, path
        assert 'name="q"' in html, path
        assert ">Find</label>" in html, path


def test_it_takes_a_person_to_the_one_operation_found(client, login, workspace):
    login("viewer")
    brief = submit_brief(workspace)
    Attempt.objects.create(
        operation=brief, number=1, fencing_token=1, started_at=timezone.now(), outcome="stale", external_id="rec-77"
    )

    response = client.get("/console/find/", {"q": "rec-77"}, follow=True)

    assert response.redirect_chain == [(f"/console/operations/{brief.pk}/", 302)]
    assert f"Found {brief.key} by its destination record id of an attempt." in response.content.decode()


def test_it_lists_several_operations_with_the_id_each_matched(client, login, workspace):
    login("viewer")
    first = submit_brief(workspace, request_id="R-1")
    second = submit_brief(workspace, request_id="R-1", version=4)

    response = client.get("/console/find/", {"q": "r-1"})

    assert response.status_code == 200
    html = response.content.decode()
    assert "2 operations match <q>r-1</q>" in html
    assert [m.operation.pk for m in response.context["found"].matches] == [second.pk, first.pk]
    assert html.count("<td>request id</td>") == 2
    assert f'href="/console/operations/{first.pk}/"' in html
    assert f'href="/console/operations/{second.pk}/"' in html


def test_it_says_nothing_was_found_and_where_it_looked(client, login, workspace, other):
    login("viewer")
    submit_brief(other, request_id="R-THEIRS")  # another workspace's: not found

    response = client.get("/console/find/", {"q": "R-THEIRS"})

    assert response.status_code == 200
    html = response.content.decode()
    assert "Nothing found for <q>R-THEIRS</q>." in html
    for label in ["key (its start)", "request id", "destination record id", "delivery id", "correlation id"]:
        assert f"<li>{label}</li>" in html
    assert 'value="R-THEIRS"' in html  # the box keeps what was typed


def test_another_workspaces_operation_is_neither_found_nor_shown(client, login, other):
    login("admin")
    theirs = submit_brief(other)
    for query in [theirs.key, str(theirs.deliveries.get().pk), "R-42"]:
        response = client.get("/console/find/", {"q": query})
        assert response.status_code == 200, query
        assert response.context["found"].matches == [], query
    assert client.get(f"/console/operations/{theirs.pk}/").status_code == 404


def test_one_operation_among_more_matches_is_listed_not_opened(client, login, workspace, monkeypatch):
    """When a field matched more than can be listed, the one operation shown may not be the only
    one: the person sees the list and is told to type more."""
    monkeypatch.setattr("ledger.reads.finding.LIMIT", 1)
    login("viewer")
    submit_brief(workspace, request_id="R-1")
    submit_brief(workspace, request_id="R-2")
    response = client.get("/console/find/", {"q": "demo:R-"})
    assert response.status_code == 200
    assert "1 operation matches" in response.content.decode()
    assert response.context["found"].more


def test_it_shows_arrivals_with_the_id_that_became_no_operation(client, login, workspace):
    login("viewer")
    record_blocked_delivery(
        workspace=workspace,
        source="api",
        reason="invalid_input",
        http_status=422,
        errors=[{"field": "data.version", "message": "Input should be a valid integer"}],
        raw={"action": "prepare-brief", "delivery_id": "d-bad", "data": {"version": "x"}},
    )

    html = client.get("/console/find/", {"q": "d-bad"}).content.decode()

    assert "Nothing found for <q>d-bad</q>." in html
    assert "Arrivals with this id that became no operation" in html
    assert "<code>data.version</code>: Input should be a valid integer" in html


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("", "Type a key, request id"),
        ("  ", "Type a key, request id"),
        ("x" * 501, "501 characters long"),
        ("a\nb", "control character"),
    ],
)
def test_it_refuses_what_cannot_be_an_id(client, login, query, said):
    login("viewer")
    response = client.get("/console/find/", {"q": query})
    assert response.status_code == 400
    assert said in response.content.decode()


def test_it_refuses_a_request_without_a_query(client, login):
    login("viewer")
    response = client.get("/console/find/")
    assert response.status_code == 400
    assert "Type a key" in response.content.decode()


def test_it_needs_a_login_and_a_workspace(client, login):
    response = client.get("/console/find/", {"q": "R-1"})
    assert (response.status_code, response.url) == (302, "/accounts/login/?next=/console/find/%3Fq%3DR-1")
    login("nobody")
    assert client.get("/console/find/", {"q": "R-1"}).status_code == 403


def test_it_lists_a_prefix_matching_many_and_says_there_are_more(client, login, workspace):
    login("viewer")
    for number in range(27):
        submit_brief(workspace, request_id=f"R-{number}")
    html = client.get("/console/find/", {"q": "demo:R-"}).content.decode()
    assert "25 operations match" in html
    assert "type more of it" in html
