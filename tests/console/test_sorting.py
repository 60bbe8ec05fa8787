"""The queue sorts by Updated and by Arrived, newest or oldest first, paged by keyset in either
direction, with headers that say how it is sorted; and it counts each state its filter offers, up
to a bound, in one query."""

import html
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger.core import accounts
from ledger.intake.submit import submit_event
from ledger.models import Operation
from ledger.people import pause
from ledger.reads import keyset
from ledger.states import ATTENTION_STATES
from opsconsole.console.filters import QUEUE_SORTS
from tests.ledger.conftest import submit_brief
from tests.plans import only_index

REFUND = {"version": 1, "customer_id": "C-1001", "amount_cents": 2500, "currency": "EUR"}


def keys_on(response) -> list[str]:
    return re.findall(r'<a href="/console/operations/\d+/[^"]*"[^>]*>([^<]+)</a>', response.content.decode())


def link(response, label: str) -> str | None:
    """The query string of the pagination link named ``label``, unescaped."""
    found = re.search(rf'<a href="(\?[^"]*)" rel="(?:next|prev)">[^<]*{label}[^<]*</a>', response.content.decode())
    return html.unescape(found.group(1)) if found else None


def refund(workspace, request_id: str, *, arrived, updated=None) -> Operation:
    """A refund awaiting approval (intake puts it there) that arrived at ``arrived``."""
    result = submit_event(
        workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND | {"request_id": request_id}}
    )
    assert result.operation.state == "pending_approval"
    Operation.objects.filter(pk=result.operation.pk).update(created_at=arrived, updated_at=updated or arrived)
    return result.operation


@pytest.fixture
def refunds(workspace):
    """120 refunds awaiting approval, R-0 the oldest arrival, the last updated most recently; and
    operations of another state and another action, which the filter leaves out."""
    start = timezone.now() - timedelta(days=30)
    made = [
        refund(
            workspace,
            f"R-{number}",
            arrived=start + timedelta(minutes=number),
            updated=start + timedelta(days=1, minutes=number),
        )
        for number in range(120)
    ]
    brief = submit_brief(workspace, request_id="B-1")
    Operation.objects.filter(pk=brief.pk).update(state="pending_approval", created_at=start - timedelta(days=1))
    return made


def test_the_oldest_refund_awaiting_approval_is_first_when_sorted_oldest_first(client, login, refunds):
    login("viewer")
    query = {"state": "pending_approval", "action": "issue-refund"}

    newest_first = keys_on(client.get("/console/", query))
    oldest_first = keys_on(client.get("/console/", query | {"sort": "oldest"}))

    assert refunds[0].key not in newest_first
    assert oldest_first[0] == refunds[0].key
    assert oldest_first == [op.key for op in refunds[:50]]


@pytest.mark.parametrize(
    ("sort", "field", "reverse"),
    [
        ("updated", "updated_at", True),
        ("least_updated", "updated_at", False),
        ("newest", "created_at", True),
        ("oldest", "created_at", False),
    ],
)
def test_each_sort_orders_by_its_column(client, login, workspace, sort, field, reverse):
    """Arrival and last change in opposite orders, so that each sort is told apart."""
    start = timezone.now() - timedelta(days=3)
    made = [
        refund(
            workspace,
            f"R-{number}",
            arrived=start + timedelta(minutes=number),
            updated=start + timedelta(hours=1) - timedelta(minutes=number),
        )
        for number in range(5)
    ]
    login("viewer")

    shown = client.get("/console/", {"sort": sort}).context["page"].object_list

    expected = sorted(made, key=lambda op: getattr(Operation.objects.get(pk=op.pk), field), reverse=reverse)
    assert [op.pk for op in shown] == [op.pk for op in expected]


def test_oldest_first_pages_onward_with_newer_and_back_with_older(client, login, refunds):
    login("viewer")
    query = {"state": "pending_approval", "action": "issue-refund", "sort": "oldest"}

    first = client.get("/console/", query)
    second = client.get("/console/" + link(first, "Newer"))
    third = client.get("/console/" + link(second, "Newer"))
    back = client.get("/console/" + link(third, "Older"))

    assert keys_on(first) == [op.key for op in refunds[:50]]
    assert keys_on(second) == [op.key for op in refunds[50:100]]
    assert keys_on(third) == [op.key for op in refunds[100:]]
    assert link(first, "Older") is None
    assert link(third, "Newer") is None
    assert keys_on(back) == keys_on(second)
    assert "sort=oldest" in link(second, "Newer")
    assert "state=pending_approval" in link(second, "Older")
    assert "« Oldest" in third.content.decode()


def test_ties_in_time_are_paged_by_id_without_loss_or_repeat(workspace):
    """Many rows with one time: the cursor's id decides, in both directions."""
    same = timezone.now()
    made = [refund(workspace, f"R-{number}", arrived=same) for number in range(7)]
    rows = Operation.objects.filter(pk__in=[op.pk for op in made])

    for ascending in (True, False):
        seen, params = [], {}
        while True:
            page = keyset.paginate(rows, params, field="created_at", size=3, ascending=ascending)
            seen += [op.pk for op in page]
            if page.onward is None:
                break
            params = {("newer" if ascending else "older"): str(page.onward)}
        assert seen == sorted(op.pk for op in made)[:: 1 if ascending else -1]


def test_the_headers_link_to_their_sort_and_say_the_current_one(client, login, refunds):
    login("viewer")

    default = client.get("/console/", {"state": "pending_approval"}).content.decode()
    oldest = client.get("/console/", {"state": "pending_approval", "sort": "oldest"}).content.decode()

    def header(page, label):
        found = re.search(rf'<th scope="col"( aria-sort="\w+")?><a class="sort" href="([^"]*)">{label}', page)
        return found.group(1) or "", html.unescape(found.group(2))

    assert header(default, "Updated") == (' aria-sort="descending"', "?state=pending_approval&sort=least_updated")
    assert header(default, "Arrived") == ("", "?state=pending_approval&sort=newest")
    assert header(oldest, "Arrived") == (' aria-sort="ascending"', "?state=pending_approval&sort=newest")
    assert header(oldest, "Updated") == ("", "?state=pending_approval&sort=updated")


def test_a_header_link_starts_the_list_again(client, login, refunds):
    """A cursor belongs to one order: choosing another sort drops it."""
    login("viewer")
    second = client.get("/console/" + link(client.get("/console/"), "Older")).content.decode()

    hrefs = [html.unescape(href) for href in re.findall(r'<a class="sort" href="([^"]*)"', second)]

    assert hrefs
    assert all("older=" not in href and "newer=" not in href for href in hrefs)


def test_an_unknown_sort_is_a_form_error_and_the_default_order(client, login, refunds):
    login("viewer")

    response = client.get("/console/", {"sort": "sideways"})

    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert keys_on(response) == keys_on(client.get("/console/"))


def test_every_sort_is_a_partial_index_on_the_attention_states():
    """Each order the queue offers (and its counts) has an index on the states it lists (0020):
    PostgreSQL would otherwise read and sort every row that needs attention."""

    def on_the_attention_states(index) -> bool:
        if index.condition is None or len(index.condition.children) != 1:
            return False
        ((lookup, states),) = index.condition.children
        return lookup == "state__in" and sorted(states) == sorted(ATTENTION_STATES)

    indexes = {index.name: index for index in Operation._meta.indexes}
    for sort in QUEUE_SORTS.values():
        # (The claim's index, on the claimable states, ends in (created_at, id) too.)
        covering = [
            index
            for index in indexes.values()
            if index.fields[-2:] == [sort.field, "id"] and on_the_attention_states(index)
        ]
        assert {tuple(index.fields[:-2]) for index in covering} == {(), ("state",)}, sort.name
    assert on_the_attention_states(indexes["operation_state_count_age_idx"])


# --- per-state counts --------------------------------------------------------------------------


def tabs(response) -> dict[str, str]:
    found = re.findall(
        r'<li><a href="[^"]*" data-state="(\w+)"(?: aria-current="page")?>[^<]+ <span class="tab-count">([^<]+)</span>',
        response.content.decode(),
    )
    return dict(found)


def test_it_counts_each_state_of_the_filter(client, login, make_operation, workspace):
    for number in range(3):
        make_operation("needs_review", request_id=f"N-{number}")
    make_operation("unknown", request_id="U-1")
    make_operation("succeeded", request_id="S-1")
    submit_brief(workspace, request_id="H-1")  # pending: held once its workspace is paused
    pause.set_paused(paused=True, reason="incident", workspace=workspace, actor="alice")
    login("viewer")

    response = client.get("/console/", {"state": "unknown"})

    assert tabs(response) == {
        "all": "4",
        "needs_review": "3",
        "unknown": "1",
        "pending_approval": "0",
        "due": "0",
        "held": "1",
    }
    assert (
        '<a href="?state=unknown" data-state="unknown" aria-current="page">Outcome unknown' in response.content.decode()
    )
    assert "1 operation" in response.content.decode()


def test_the_counts_keep_the_other_filters(client, login, make_operation, scripted_action):
    here = make_operation("needs_review", request_id="R-1")
    make_operation("needs_review", request_id="R-2")
    other = scripted_action()
    elsewhere = submit_event(
        workspace=here.workspace, source="api", raw={"action": other.name, "data": {"request_id": "R-3", "version": 1}}
    ).operation
    Operation.objects.filter(pk=elsewhere.pk).update(state="unknown")
    login("viewer")

    assert tabs(client.get("/console/", {"action": here.action}))["all"] == "2"
    assert tabs(client.get("/console/", {"action": other.name})) == {
        "all": "1",
        "needs_review": "0",
        "unknown": "1",
        "pending_approval": "0",
        "due": "0",
        "held": "0",
    }
    assert tabs(client.get("/console/", {"q": "R-1"}))["needs_review"] == "1"


def test_a_members_counts_of_old_work_read_the_index_alone(client, login, make_operation):
    """A member's queue filtered by age: each attention state's count is read from
    ``operation_state_count_age_idx`` alone (the workspace, action and arrival are in it), with the
    table's other indexes dropped in the test's transaction: through the index without the arrival
    every counted row was read from the table (126 ms at 5,000,000 operations, migration 0069)."""
    long_ago = timezone.now() - timedelta(days=2)
    for number, state in enumerate(ATTENTION_STATES):
        make_operation(state, request_id=f"R-{number}", created_at=long_ago)
    make_operation("needs_review", request_id="R-new")
    login("viewer")
    with CaptureQueriesContext(connection) as captured:
        response = client.get("/console/", {"age": "24h"})
    (counts,) = [query["sql"] for query in captured if query["sql"].startswith("SELECT (SELECT COUNT(*)")]
    only_index("ledger_operation", "operation_state_count_age_idx")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a table this small is read whole otherwise
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute("EXPLAIN " + counts)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert tabs(response)["all"] == "3"
    assert plan.count("Index Only Scan using operation_state_count_age_idx") == len(ATTENTION_STATES), plan
    assert "workspace_id = " in plan, plan  # the member's workspaces: in the count, from the index


def test_the_counts_stop_at_the_bound(client, login, make_operation, monkeypatch):
    from opsconsole.console import views

    monkeypatch.setattr(views, "QUEUE_COUNT_CAP", 3)
    for number in range(5):
        make_operation("needs_review", request_id=f"R-{number}")
    make_operation("unknown", request_id="U-1")
    login("viewer")

    counts = tabs(client.get("/console/"))

    assert counts["all"] == "3+"
    assert counts["needs_review"] == "3+"
    assert counts["unknown"] == "1"


def test_the_counts_are_one_query(client, login, make_operation, workspace, send_invoice_action):
    make_operation("needs_review")
    pause.set_paused(paused=True, reason="incident", workspace=workspace, actor="alice")
    login("viewer")

    with CaptureQueriesContext(connection) as queries:
        client.get("/console/", {"action": "x"})

    counting = [
        q["sql"]
        for q in queries.captured_queries
        if "bounded_" in q["sql"] or "COUNT(" in q["sql"] and "ledger_conflict" not in q["sql"]
    ]
    assert len(counting) == 1
    assert counting[0].count("COUNT(*)") == len(ATTENTION_STATES) + 2  # and due, and held


def test_nothing_paused_counts_no_held_work_without_asking(client, login, make_operation, send_invoice_action):
    make_operation("needs_review")
    login("viewer")

    with CaptureQueriesContext(connection) as queries:
        response = client.get("/console/")

    assert tabs(response)["held"] == "0"
    counting = [
        q["sql"]
        for q in queries.captured_queries
        if "bounded_" in q["sql"] or "COUNT(" in q["sql"] and "ledger_conflict" not in q["sql"]
    ]
    assert (
        counting[0].count("COUNT(*)") == len(ATTENTION_STATES) + 1
    )  # and due for their callers (the demo's send-invoice is theirs)


def test_the_counts_see_only_the_persons_workspaces(client, login, make_operation):
    make_operation("needs_review")
    theirs, _ = accounts.create_workspace(slug="theirs", approved_owners=["ops"], actor="test")
    other = submit_brief(theirs, request_id="T-1")
    Operation.objects.filter(pk=other.pk).update(state="needs_review")
    login("viewer")

    assert tabs(client.get("/console/"))["needs_review"] == "1"
