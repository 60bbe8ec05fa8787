"""Every console page costs a fixed number of queries, whatever it lists: 35 rows of everything a
page shows are enough for one query per row (an N+1) to break the budget."""

import re

import pytest
from django.utils import timezone

from ledger.core import audit_chain
from ledger.models import (
    Approval,
    Attempt,
    AuditEvent,
    Conflict,
    Contribution,
    Control,
    Delivery,
    Membership,
    Operation,
    Workspace,
)
from ledger.reads.finding import LIMIT
from opsconsole.console.conflicts import PAGE_SIZE, ROWS_PER_ACTION
from tests.conftest import IN_INDEX_ORDER
from tests.ledger.conftest import submit

ROWS = 35


@pytest.fixture(autouse=True)
def configured_actions_read_once(monkeypatch):
    """The registry looks at the configured actions again every 2 s (ledger.integrations.configured): on a
    slow machine a test's setup outlasts that, and the look (3 statements in a test's transaction)
    would land in whichever request comes next. Not what these budgets are about."""
    monkeypatch.setattr("ledger.integrations.configured.Loaded.REFRESH_SECONDS", float("inf"))


@pytest.fixture
def crowded(workspace, action, django_user_model):
    """ROWS operations needing review in "demo", one of them with ROWS of everything its page shows,
    ROWS pause switches (one per workspace), and more than a page of audit events naming operations.
    Written directly (test setup only): through the services this would take minutes."""
    operations = [submit(workspace, action.name, request_id=f"R-{number}") for number in range(ROWS)]
    Operation.objects.filter(pk__in=[op.pk for op in operations]).update(state="needs_review")
    busy = operations[0]
    now = timezone.now()
    people = django_user_model.objects.bulk_create(
        [django_user_model(username=f"person-{number}") for number in range(ROWS)]
    )
    Attempt.objects.bulk_create(
        [
            Attempt(operation=busy, number=n, fencing_token=n, started_at=now, finished_at=now, outcome="transient")
            for n in range(1, ROWS + 1)
        ]
    )
    deliveries = Delivery.objects.bulk_create(
        [
            Delivery(workspace=workspace, operation=busy, source="api", outcome="conflict", key=busy.key)
            for _ in range(ROWS)
        ]
    )
    Conflict.objects.bulk_create(
        [
            Conflict(
                operation=busy,
                delivery=delivery,
                incoming_fingerprint="f",
                incoming_payload={},
                differences=[{"field": "version", "recorded": 1, "incoming": 2}],
            )
            for delivery in deliveries
        ]
    )
    Contribution.objects.bulk_create([Contribution(operation=busy, user=person, kind="replayed") for person in people])
    Approval.objects.bulk_create(
        [Approval(operation=busy, fingerprint="f", decision="rejected", approver=f"a{n}") for n in range(ROWS)]
    )
    audit_chain.append(
        [
            AuditEvent(operation=op, workspace=workspace, actor="worker", kind="claimed")
            for op in operations
            for _ in range(3)
        ]
    )
    workspaces = Workspace.objects.bulk_create([Workspace(slug=f"w{number}") for number in range(ROWS)])
    Control.objects.bulk_create([Control(workspace=w, paused=True, paused_since=now, reason="r") for w in workspaces])
    return busy


@pytest.fixture(params=["superuser", "member"])
def someone(request, client, django_user_model):
    """A superuser (sees every workspace), or an operator of every workspace (their queries differ).
    No passwords: hashing one costs more than a test."""
    if request.param == "superuser":
        user = django_user_model.objects.create_superuser("root", email=None, password=None)
    else:
        user = django_user_model.objects.create_user(username="member")
        Membership.objects.bulk_create(
            [Membership(user=user, workspace=w, role="operator") for w in Workspace.objects.all()]
        )
    client.force_login(user)
    return user


def older_link(client, path, params) -> dict:
    """The query of the first page's "Older" link: the keyset cursor of a deeper page."""
    page = client.get(path, params).context["page"]
    assert page.older is not None
    return params | {"older": str(page.older)}


# Session, user and (unless a superuser) memberships; the workspaces of the filter (and the chosen
# one, checked); the page, the bounded count, open conflicts, the sweep's heartbeat, the pause
# switches, the oldest due operation, the oldest one waiting for its caller's claim and (a switch
# being on) the oldest held one; and, when more match than the page shows, the count and digest of
# their ids ("select all N matching").
QUEUE_QUERIES = 14 + IN_INDEX_ORDER


def test_the_queue_costs_the_same_for_any_filter(client, crowded, someone, workspace, django_assert_max_num_queries):
    for params in [
        {},
        {"state": "all"},
        {"state": "needs_review", "workspace": workspace.pk},
        {"action": crowded.action, "q": "R-1"},
        {"q": "demo:R-2"},
    ]:
        with django_assert_max_num_queries(QUEUE_QUERIES, info=str(params)):
            response = client.get("/console/", params)
        assert len(response.context["page"]) > 0, params


def test_a_deeper_page_of_the_queue_costs_the_same(
    client, crowded, someone, workspace, make_operation, django_assert_max_num_queries
):
    for number in range(60):
        make_operation("needs_review", request_id=f"D-{number}")
    params = older_link(client, "/console/", {"workspace": workspace.pk})
    with django_assert_max_num_queries(QUEUE_QUERIES):
        response = client.get("/console/", params)
    assert len(response.context["page"]) > 0


def test_the_operation_page_costs_the_same_however_much_it_shows(
    client, crowded, someone, django_assert_max_num_queries
):
    # ... and, for one that may be replayed, the configuration its last attempt ran under; the
    # pause switches (is it held?).
    with django_assert_max_num_queries(12):
        response = client.get(f"/console/operations/{crowded.pk}/")
    html = response.content.decode()
    assert html.count("person-") == ROWS
    assert html.count("transient") >= ROWS


def test_the_controls_page_costs_the_same_however_many_switches(
    client, crowded, someone, django_assert_max_num_queries
):
    # ... the last one: what each switch holds, counted in one query.
    with django_assert_max_num_queries(8):
        response = client.get("/console/controls/")
    assert response.content.decode().count("workspace w") == ROWS


# Session, user, memberships; the workspaces of the filter (and the chosen one); one page of events
# with their operations and workspaces; the newest archived month's end.
AUDIT_QUERIES = 7


def test_the_audit_page_costs_the_same_for_any_filter(
    client, crowded, someone, workspace, django_assert_max_num_queries
):
    for params in [
        {},
        {"kind": "claimed"},
        {"actor": "WORKER"},
        {"workspace": workspace.pk},
        {"key": "R-1"},
        {"created_after": "2000-01-01", "created_before": "2999-12-31"},
    ]:
        with django_assert_max_num_queries(AUDIT_QUERIES, info=str(params)):
            response = client.get("/console/audit/", params)
        assert len(response.context["page"]) > ROWS // 3, params


def test_an_older_page_of_the_audit_trail_costs_the_same(client, crowded, someone, django_assert_max_num_queries):
    params = older_link(client, "/console/audit/", {"kind": "claimed"})
    with django_assert_max_num_queries(AUDIT_QUERIES):
        response = client.get("/console/audit/", params)
    assert len(response.context["page"]) == 3 * ROWS - 100


# Session, user, memberships; the workspaces of the filter (and the chosen one, checked); the open
# conflicts with their operations, read once for the counts, the lists, the groups and each group's
# "dismiss all N matching" digest; the bounded count of decided ones; the rows shown (one query).
CONFLICTS_QUERIES = 8


def conflict_on_each_other_operation(crowded, workspace) -> None:
    """Besides the busy operation's ROWS conflicts, one on each other operation: more than a page."""
    others = list(Operation.objects.exclude(pk=crowded.pk))
    deliveries = Delivery.objects.bulk_create(
        [Delivery(workspace=workspace, operation=op, source="api", outcome="conflict", key=op.key) for op in others]
    )
    Conflict.objects.bulk_create(
        [
            Conflict(
                operation=delivery.operation,
                delivery=delivery,
                incoming_fingerprint="f",
                incoming_payload={},
                differences=[{"field": "version", "recorded": 1, "incoming": 2}],
            )
            for delivery in deliveries
        ]
    )
    Operation.objects.update(attempts=1)  # they ran: every conflict is dismiss-only (test setup only)


def test_the_conflicts_inbox_costs_the_same_however_many_conflicts(
    client, crowded, someone, workspace, django_assert_max_num_queries
):
    conflict_on_each_other_operation(crowded, workspace)
    for params in [{}, {"workspace": workspace.pk}, {"action": crowded.action}, {"state": "dismiss_only"}]:
        with django_assert_max_num_queries(CONFLICTS_QUERIES, info=str(params)):
            response = client.get("/console/conflicts/", params)
        [group] = response.context["dismissable"]
        assert len(group["rows"]) == (PAGE_SIZE if "action" in params else ROWS_PER_ACTION), params
    one_action = {"state": "dismiss_only", "action": crowded.action}
    deeper = one_action | {"older": client.get("/console/conflicts/", one_action).context["older"]}
    with django_assert_max_num_queries(CONFLICTS_QUERIES):
        response = client.get("/console/conflicts/", deeper)
    [group] = response.context["dismissable"]
    assert len(group["rows"]) == 2 * ROWS - 1 - PAGE_SIZE  # the busy operation's ROWS, one of each other
    with django_assert_max_num_queries(CONFLICTS_QUERIES):
        client.get("/console/conflicts/", {"state": "decided"})


def test_the_conflicts_inbox_costs_the_same_however_many_actions_it_groups(
    client, crowded, someone, workspace, django_assert_max_num_queries
):
    """Each action's group, its rows and its "dismiss all N matching" come from the page's one read of
    the open conflicts: a fourth group is no query more."""
    conflict_on_each_other_operation(crowded, workspace)
    others = list(Operation.objects.exclude(pk=crowded.pk).order_by("pk"))
    for place, name in enumerate(["prepare-brief", "file-ticket", "send-notice"]):  # test setup only
        Operation.objects.filter(pk__in=[op.pk for op in others[place::3]]).update(action=name)

    with django_assert_max_num_queries(CONFLICTS_QUERIES):
        response = client.get("/console/conflicts/")

    groups = response.context["dismissable"]
    assert len(groups) == 4
    assert all(group["matching"]["count"] == group["count"] for group in groups)


# Session, user, memberships; one bounded count per unfinished state (6); the pause switches and
# what they hold; the oldest due and held work; the sampled flows and backlog; the sampling
# heartbeat; the live last hour; open mismatches by kind and the latest audit runs; the configured
# destinations, their actions and their breakers' rows (a member of fewer than 6 workspaces has one
# more: their names).
DASHBOARD_QUERIES = 22 + IN_INDEX_ORDER


def test_the_dashboard_costs_the_same_however_much_was_sampled(
    client, crowded, someone, workspace, action, django_assert_max_num_queries
):
    from ledger.models import Destination, DestinationHealth, FlowSample
    from ledger.reads import dashboard
    from reconciliation.models import Mismatch, ReconciliationRun

    now = timezone.now()
    dashboard.take_samples(now=now, catch_up=30)
    hours = [dashboard.hour_of(now) - timezone.timedelta(hours=n) for n in range(24)]
    FlowSample.objects.bulk_create(
        [
            FlowSample(
                workspace=w, action=action.name, hour=hour, since=hour, until=hour, attempts=3, failures=1, succeeded=2
            )
            for hour in hours
            for w in Workspace.objects.all()
        ]
    )
    run = ReconciliationRun.objects.create(started_at=now, since=now, until=now, status="succeeded")
    for n in range(ROWS):  # the Destinations panel: one breaker row each, read together
        destination = Destination.objects.create(slug=f"vendor-{n}", base_url="https://vendor.example.com")
        DestinationHealth.objects.create(name=DestinationHealth.row_of(destination.slug), failures_in_row=1)
    Mismatch.objects.bulk_create(
        [
            Mismatch(run=run, workspace=workspace, action=action.name, reference=f"r-{n}", kind="unknown_to_ledger")
            for n in range(ROWS)
        ]
    )
    # The live last hour: ROWS attempts of every workspace ended since the last sample, each a success.
    audit_chain.append(
        [
            AuditEvent(operation=crowded, workspace=w, actor="worker", kind="x", from_state="processing", to_state=to)
            for w in Workspace.objects.all()
            for to in ["succeeded"] * ROWS
        ]
    )
    for headers in [{}, {"HX-Request": "true"}]:  # the page, and the fragment that refreshes it
        with django_assert_max_num_queries(DASHBOARD_QUERIES, info=str(headers)):
            response = client.get("/console/dashboard/", headers=headers)
        figures = response.context["figures"]
        assert figures.live.finished == ROWS * (ROWS + 1)
        assert figures.finished == 2 * 24 * (ROWS + 1) + ROWS * (ROWS + 1)
        assert response.context["results"].open_total == ROWS


def test_the_operation_page_costs_the_same_for_a_person_who_cannot_act(
    client, crowded, django_user_model, workspace, django_assert_max_num_queries
):
    # ... and who can: the operators and admins of the workspace, named in one bounded query.
    viewer = django_user_model.objects.create_user(username="viewer")
    Membership.objects.bulk_create(
        [Membership(user=viewer, workspace=workspace, role="viewer")]
        + [
            Membership(user=person, workspace=workspace, role="operator")
            for person in django_user_model.objects.filter(username__startswith="person-")
        ]
    )
    client.force_login(viewer)
    with django_assert_max_num_queries(13):
        response = client.get(f"/console/operations/{crowded.pk}/")
    assert (
        "can replay it or cancel it (operators and admins: person-0, person-1, person-10" in response.content.decode()
    )


def test_the_approve_confirmation_costs_the_same_however_many_people_are_behind_it(
    client, crowded, someone, django_assert_max_num_queries
):
    Operation.objects.filter(pk=crowded.pk).update(state="pending_approval")
    Membership.objects.filter(user=someone).update(role="admin")  # who may approve
    # Session, user, memberships (unless a superuser); the operation; the people behind it.
    with django_assert_max_num_queries(5):
        response = client.get(f"/console/operations/{crowded.pk}/approve/")
    assert response.content.decode().count("person-") == ROWS


# Session, user, memberships (and, for a member, their workspaces' slugs: can it begin a key?); one
# bounded lookup per field (key, request id, record id, an attempt's record id; for a delivery id, a
# delivery's number when it is one, and a correlation id, the operations and the refused arrivals);
# the operations found with their workspaces.
FIND_QUERIES = 15


def test_finding_costs_the_same_however_many_match(client, crowded, someone, django_assert_max_num_queries):
    Delivery.objects.filter(operation__isnull=False).update(correlation_id="flow-1")
    Delivery.objects.bulk_create(
        [
            Delivery(
                workspace=crowded.workspace,
                source="api",
                outcome="invalid",
                correlation_id="flow-1",
                errors=[{"field": "body", "message": "m"}],
            )
            for _ in range(ROWS)
        ]
    )
    for params in [{"q": "demo:"}, {"q": "flow-1"}, {"q": str(crowded.deliveries.first().pk)}, {"q": "nothing"}]:
        with django_assert_max_num_queries(FIND_QUERIES, info=str(params)):
            response = client.get("/console/find/", params)
        assert response.status_code in (200, 302), params
    assert response.context["found"].matches == []
    assert len(client.get("/console/find/", {"q": "flow-1"}).context["found"].matches) == LIMIT < ROWS


# Session, user, memberships; the workspaces of the filter (and the chosen one); one page of
# deliveries with their workspaces and conflicts; the hooks' counted refusals, added up in one.
DELIVERIES_QUERIES = 7


def test_the_deliveries_page_costs_the_same_for_any_filter(
    client, crowded, someone, workspace, django_assert_max_num_queries
):
    Delivery.objects.bulk_create(
        [
            Delivery(
                workspace=workspace, source="cli", outcome="invalid", errors=[{"field": "data.version", "message": "m"}]
            )
            for _ in range(ROWS)
        ]
    )
    for params in [{}, {"outcome": "conflict"}, {"outcome": "invalid", "source": "cli"}, {"workspace": workspace.pk}]:
        with django_assert_max_num_queries(DELIVERIES_QUERIES, info=str(params)):
            response = client.get("/console/deliveries/", params)
        assert len(response.context["page"]) >= ROWS, params
    params = older_link(client, "/console/deliveries/", {})
    with django_assert_max_num_queries(DELIVERIES_QUERIES):
        response = client.get("/console/deliveries/", params)
    assert len(response.context["page"]) == 2 * ROWS - 50


def test_the_failures_page_costs_the_same_however_many_groups(client, crowded, someone, django_assert_max_num_queries):
    for number, operation in enumerate(Operation.objects.filter(state="needs_review")):
        Operation.objects.filter(pk=operation.pk).update(
            last_error_category="permanent", last_error_message=f"failure {'x' * (number + 1)}"
        )
    # Session, user, memberships; the groups, counted in one query; an example answer for each: one
    # operation per group, then one try per operation (ledger.reads.failure_groups.example_answers).
    with django_assert_max_num_queries(6):
        response = client.get("/console/failures/")
    assert len(response.context["groups"]) == ROWS


def test_the_bulk_progress_page_costs_the_same_however_many_operations(
    client, crowded, someone, django_assert_max_num_queries
):
    from ledger.models import BulkAction, BulkItem

    operations = list(Operation.objects.filter(state="needs_review"))
    bulk = BulkAction.objects.create(
        kind="replay",
        reason="r",
        user=someone,
        token="t",
        total=len(operations),
        operation_ids=[op.pk for op in operations],
        status="running",
    )
    BulkItem.objects.bulk_create(
        [
            BulkItem(
                bulk_action=bulk, operation=op, outcome="skipped" if n % 2 else "replayed", detail=f"reason {n % 5}"
            )
            for n, op in enumerate(operations)
        ]
    )
    # Session, user, memberships; the action, a page of its outcomes with their operations, the reasons.
    for headers in [{}, {"HX-Request": "true"}]:
        with django_assert_max_num_queries(6, info=str(headers)):
            response = client.get(f"/console/bulk/{bulk.pk}/", headers=headers)
        assert len(re.findall(r"/console/operations/\d+/", response.content.decode())) == ROWS


@pytest.mark.slow
def test_the_queue_costs_the_same_in_any_order(
    client, crowded, someone, workspace, make_operation, django_assert_max_num_queries
):
    # The per-state counts are one query (tables.bounded_counts), whatever the sort.
    for number in range(60):
        make_operation("needs_review", request_id=f"D-{number}")
    for sort in ["updated", "least_updated", "newest", "oldest"]:
        params = {"sort": sort, "state": "needs_review", "workspace": workspace.pk}
        with django_assert_max_num_queries(QUEUE_QUERIES, info=sort):
            response = client.get("/console/", params)
        page = response.context["page"]
        assert len(page) == 50, sort
        onward = params | {"newer" if page.ascending else "older": str(page.onward)}
        with django_assert_max_num_queries(QUEUE_QUERIES, info=sort):
            response = client.get("/console/", onward)
        assert len(response.context["page"]) > 0, sort


def _drained(response) -> bytes:
    return b"".join(response.streaming_content)


# Session, user and (unless a superuser) memberships; the chosen workspace (checked); the pause
# switches; then one read of every row (its workspace joined; on PostgreSQL a server-side cursor, in a
# transaction: two more statements, the savepoint and its release inside a test's transaction).
QUEUE_EXPORT_QUERIES = 8


def test_the_queue_export_costs_the_same_however_many_rows(
    client, crowded, someone, workspace, make_operation, django_assert_max_num_queries
):
    for params in [{}, {"state": "needs_review", "workspace": workspace.pk, "sort": "oldest"}]:
        with django_assert_max_num_queries(QUEUE_EXPORT_QUERIES, info=str(params)):
            few = _drained(client.get("/console/export.csv", params))
        assert few.count(b"\n") == ROWS + 1, params
    for number in range(3 * ROWS):
        make_operation("needs_review", request_id=f"M-{number}")
    with django_assert_max_num_queries(QUEUE_EXPORT_QUERIES):
        many = _drained(client.get("/console/export.csv"))
    assert many.count(b"\n") == 4 * ROWS + 1


# Session, user, memberships; the chosen workspace; one read of every event, with its operation and
# workspace joined (on PostgreSQL in a transaction, as above).
AUDIT_EXPORT_QUERIES = 7


def test_the_audit_export_costs_the_same_for_any_filter(
    client, crowded, someone, workspace, django_assert_max_num_queries
):
    for params in [
        {},
        {"kind": "claimed"},
        {"actor": "WORKER"},
        {"workspace": workspace.pk},
        {"key": "R-1"},
        {"created_after": "2000-01-01", "created_before": "2999-12-31"},
    ]:
        with django_assert_max_num_queries(AUDIT_EXPORT_QUERIES, info=str(params)):
            body = _drained(client.get("/console/audit/export.csv", params))
        assert body.count(b"\n") > ROWS // 3, params


# Session, user and (unless a superuser) memberships; the chosen workspace (checked); one page of rows;
# the workspaces of the filter. Nothing counts the list.
ALL_OPERATIONS_QUERIES = 6


def test_the_list_of_all_operations_costs_the_same_for_any_filter(
    client, crowded, someone, workspace, make_operation, django_assert_max_num_queries
):
    for number in range(60):
        make_operation("succeeded", request_id=f"S-{number}")
    for params in [
        {},
        {"state": "succeeded"},
        {"state": "needs_review", "workspace": workspace.pk},
        {"action": crowded.action, "category": "permanent", "age": "1h"},
        {"destination": crowded.action, "q": "R-1", "sort": "oldest"},
    ]:
        with django_assert_max_num_queries(ALL_OPERATIONS_QUERIES, info=str(params)):
            response = client.get("/console/operations/", params)
        assert response.status_code == 200, params
    deeper = older_link(client, "/console/operations/", {})
    with django_assert_max_num_queries(ALL_OPERATIONS_QUERIES):
        response = client.get("/console/operations/", deeper)
    assert len(response.context["page"]) > 0


def test_who_took_each_row_costs_nothing_more(
    client, crowded, someone, django_user_model, django_assert_max_num_queries
):
    people = list(django_user_model.objects.filter(username__startswith="person-"))
    for operation, person in zip(Operation.objects.filter(state="needs_review"), people, strict=False):
        Operation.objects.filter(pk=operation.pk).update(assigned_to=person, assigned_at=timezone.now())
    for path, budget in [("/console/", QUEUE_QUERIES), ("/console/operations/", ALL_OPERATIONS_QUERIES)]:
        with django_assert_max_num_queries(budget, info=path):
            response = client.get(path, {"assigned": "anyone"})
        assert response.content.decode().count('<span class="taken"') == ROWS, path
    with django_assert_max_num_queries(12):
        client.get(f"/console/operations/{crowded.pk}/")


def test_the_operation_page_opened_from_a_list_costs_two_reads_more(
    client, crowded, someone, workspace, django_assert_max_num_queries
):
    """Its neighbours: one row each way along the list's index (and, from the queue, the pause
    switches and the chosen workspace, as the queue reads them)."""
    for query, budget in [
        ("list=all", 12 + 2),
        (f"list=queue&state=needs_review&workspace={workspace.pk}&sort=oldest", 12 + 4),
    ]:
        with django_assert_max_num_queries(budget, info=query):
            response = client.get(f"/console/operations/{crowded.pk}/?{query}")
        assert response.context["neighbours"] is not None, query
