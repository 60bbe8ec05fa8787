"""The queue lists the operations that need a person, filtered and paginated at a fixed cost."""

import html
import re
from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger.core import accounts
from ledger.models import Heartbeat, Operation
from ledger.states import ATTENTION_STATES
from tests.ledger.conftest import submit


def keys_on(response) -> set[str]:
    return set(re.findall(r'<a href="/console/operations/\d+/[^"]*"[^>]*>([^<]+)</a>', response.content.decode()))


def test_it_lists_exactly_the_operations_needing_attention(client, login, make_operation):
    login("viewer")
    shown = {
        make_operation(state, request_id=f"R-{state}").key for state in ["needs_review", "unknown", "pending_approval"]
    }
    for state in ["pending", "retrying", "processing", "succeeded", "cancelled", "rejected"]:
        make_operation(state, request_id=f"R-{state}")

    response = client.get("/console/")

    assert response.status_code == 200
    assert keys_on(response) == shown
    assert client.get("/console/", {"state": "all"}).status_code == 200
    assert keys_on(client.get("/console/", {"state": "all"})) == shown


def test_it_filters_by_state(client, login, make_operation):
    login("viewer")
    review = make_operation("needs_review", request_id="R-1")
    make_operation("unknown", request_id="R-2")

    assert keys_on(client.get("/console/", {"state": "needs_review"})) == {review.key}


def test_it_filters_by_workspace_and_action(client, login, make_operation, scripted_action):
    viewer = login("viewer")
    here = make_operation("needs_review", request_id="R-1")
    other_workspace, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    accounts.set_membership(workspace=other_workspace, user=viewer, role="viewer", actor="test")
    other_action = scripted_action()
    elsewhere = submit(other_workspace, here.action, request_id="R-1")
    other_kind = submit(here.workspace, other_action.name, request_id="R-1")
    for operation in (elsewhere, other_kind):
        type(operation).objects.filter(pk=operation.pk).update(state="needs_review")

    assert keys_on(client.get("/console/", {"workspace": other_workspace.pk})) == {elsewhere.key}
    assert keys_on(client.get("/console/", {"action": other_action.name})) == {other_kind.key}
    both = {"workspace": here.workspace.pk, "action": here.action}
    assert keys_on(client.get("/console/", both)) == {here.key}


def test_it_searches_by_key_or_request_id(client, login, make_operation):
    login("viewer")
    first = make_operation("needs_review", request_id="INV-1001")
    second = make_operation("unknown", request_id="INV-2002")

    assert keys_on(client.get("/console/", {"q": "inv-1001"})) == {first.key}
    assert keys_on(client.get("/console/", {"q": second.key})) == {second.key}
    assert keys_on(client.get("/console/", {"q": "INV-"})) == {first.key, second.key}
    assert keys_on(client.get("/console/", {"q": "nothing-like-it"})) == set()


def test_it_shows_the_columns_of_each_operation(client, login, make_operation):
    login("viewer")
    operation = make_operation(
        "needs_review", attempts=3, last_error_category="permanent", last_error_message="owner does not exist"
    )

    page = client.get("/console/").content.decode()

    for column in ["Key", "Action", "State", "Attempts", "Last error"]:
        assert f'<th scope="col">{column}</th>' in page
    for column in ["Arrived", "Updated"]:  # sortable (tests/console/test_sorting.py)
        assert re.search(rf'<th scope="col"[^>]*><a class="sort" href="[^"]*">{column}', page), column
    assert operation.action in page
    assert "needs_review" in page
    assert "owner does not exist" in page


def link(response, label: str) -> str | None:
    """The href of the pagination link named ``label`` ("Older", "Newer", "Newest"), unescaped."""
    found = re.search(rf'<a href="([^"]*)"[^>]*>[^<]*{label}[^<]*</a>', response.content.decode())
    return html.unescape(found.group(1)) if found else None


def test_it_pages_by_fifty_at_a_cost_that_does_not_grow_with_the_page(client, login, make_operation):
    login("viewer")
    for number in range(5):
        make_operation("needs_review", request_id=f"R-{number}")
    with CaptureQueriesContext(connection) as few:
        response = client.get("/console/")
    assert len(keys_on(response)) == 5

    for number in range(5, 60):
        make_operation("needs_review", request_id=f"R-{number}")
    with CaptureQueriesContext(connection) as full:
        response = client.get("/console/")

    assert len(keys_on(response)) == 50
    assert len(full) == len(few)
    assert "60 operations" in response.content.decode()
    assert link(response, "Newer") is None
    assert link(response, "Newest") is None


def test_it_pages_from_the_most_recently_updated_with_older_and_newer_links(client, login, make_operation):
    """Keyset pages: "Older" continues after the last row shown, "Newer" comes back, and both keep
    the filters; no row is shown twice or skipped."""
    login("viewer")
    made = [make_operation("needs_review", request_id=f"R-{number}").key for number in range(60)]
    make_operation("unknown", request_id="R-unknown")

    first = client.get("/console/", {"state": "needs_review"})
    older = client.get("/console/" + link(first, "Older"))
    newer = client.get("/console/" + link(older, "Newer"))

    assert (
        re.findall(r'<a href="/console/operations/\d+/[^"]*"[^>]*>([^<]+)</a>', first.content.decode())
        == made[::-1][:50]
    )
    assert keys_on(older) == set(made[:10])
    assert "state=needs_review" in link(first, "Older")
    assert "state=needs_review" in link(older, "Newer")
    assert link(older, "Older") is None
    assert link(older, "Newest").startswith("?state=needs_review")
    assert keys_on(newer) == keys_on(first)


def test_it_counts_what_needs_attention_up_to_a_bound(client, login, make_operation, monkeypatch):
    from opsconsole.console import views

    login("viewer")
    monkeypatch.setattr(views, "QUEUE_COUNT_CAP", 3)
    for number in range(3):
        make_operation("needs_review", request_id=f"R-{number}")
    assert "3 operations" in client.get("/console/").content.decode()

    make_operation("needs_review", request_id="R-3")

    assert "More than 3 operations" in client.get("/console/").content.decode()


def test_it_shows_the_health_of_the_sweep_and_the_due_work(client, login, make_operation):
    login("viewer")
    page = client.get("/console/").content.decode()
    assert "Sweep has not run" in page
    assert "No operation is due" in page

    Heartbeat.objects.create(name="sweep", beat_at=timezone.now() - timedelta(seconds=42))
    make_operation("pending")
    page = client.get("/console/").content.decode()

    assert re.search(r"Sweep last ran 4[23] s ago", page)
    assert re.search(r"Oldest due operation waiting [0-9]+ s", page)


def test_it_counts_the_open_conflicts(client, login, noted):
    login("viewer")
    noted(note="first")
    assert "Open conflicts: 0" in client.get("/console/").content.decode()

    assert noted(note="second").outcome == "conflict"

    assert "Open conflicts: 1" in client.get("/console/").content.decode()


def test_it_lists_the_states_its_index_covers():
    """The queue is read through a partial index (migration 0007) on exactly these states: were
    the two to differ, PostgreSQL would stop using it and sort every row that needs attention."""
    index = next(index for index in Operation._meta.indexes if index.name == "operation_attention_idx")
    ((lookup, states),) = index.condition.children

    assert lookup == "state__in"
    assert sorted(states) == sorted(ATTENTION_STATES)
