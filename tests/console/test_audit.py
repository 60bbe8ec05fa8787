"""The audit page lists audit events newest first, filtered by kind, actor, workspace, key and dates."""

import re
from datetime import UTC, datetime

from ledger import services
from ledger.models import AuditEvent


def kinds_on(response) -> list[str]:
    rows = re.findall(r"<tr>\s*<td[^>]*>[^<]*</td>\s*<td>([^<]*)</td>\s*<td>([^<]*)</td>", response.content.decode())
    return [f"{actor}:{kind}" for actor, kind in rows]


def test_it_lists_events_newest_first_with_links_to_their_operations(client, login, workspace, make_operation):
    login("viewer")
    operation = make_operation()
    services.set_paused(paused=True, actor="alice", reason="incident", workspace=workspace)

    response = client.get("/console/audit/")

    assert kinds_on(response)[0] == "alice:paused"
    assert f'<a href="/console/operations/{operation.pk}/">{operation.key}</a>' in response.content.decode()


def test_it_filters_by_kind_actor_workspace_and_key(client, login, workspace, make_operation):
    login("viewer")
    first = make_operation(request_id="INV-1")
    make_operation(request_id="INV-2")
    other, _ = services.create_workspace(slug="other", approved_owners=[], actor="bob")
    services.set_paused(paused=True, actor="alice", reason="incident", workspace=workspace)

    assert kinds_on(client.get("/console/audit/", {"kind": "paused"})) == ["alice:paused"]
    assert kinds_on(client.get("/console/audit/", {"actor": "ALI"})) == ["alice:paused"]
    # Another workspace's events are not shown, even when asked for by its id.
    assert "bob:token_issued" not in kinds_on(client.get("/console/audit/", {"workspace": other.pk}))
    assert kinds_on(client.get("/console/audit/", {"workspace": workspace.pk}))[0] == "alice:paused"
    keyed = client.get("/console/audit/", {"key": "INV-1"})
    assert len(kinds_on(keyed)) == AuditEvent.objects.filter(operation=first).count() > 0
    assert "INV-2" not in keyed.content.decode()


def test_it_filters_by_dates_inclusively(client, login, workspace, time_machine):
    for day in (1, 2, 3):
        time_machine.move_to(datetime(2030, 1, day, 12, tzinfo=UTC), tick=False)
        services.set_paused(paused=True, actor=f"day{day}", reason="r", workspace=workspace)
        services.set_paused(paused=False, actor=f"day{day}", reason="r", workspace=workspace)
    login("viewer")  # after moving the clock, so the session has not expired

    days = {"actor": "day"}  # not the workspace's own creation, which happened today
    after = kinds_on(client.get("/console/audit/", days | {"created_after": "2030-01-02"}))
    before = kinds_on(client.get("/console/audit/", days | {"created_before": "2030-01-02"}))
    both = kinds_on(client.get("/console/audit/", days | {"created_after": "2030-01-02",
                                                          "created_before": "2030-01-02"}))

    assert {row.split(":")[0] for row in after} == {"day2", "day3"}
    assert {row.split(":")[0] for row in before} == {"day1", "day2"}
    assert both == ["day2:resumed", "day2:paused"]


def test_it_pages_by_a_hundred(client, login, workspace):
    login("viewer")
    events = AuditEvent.objects.filter(workspace=workspace).count()  # the workspace's own creation
    for number in range(101 - events):
        services.set_paused(paused=number % 2 == 0, actor="a", reason="r", workspace=workspace)

    first = client.get("/console/audit/")
    second = client.get("/console/audit/", {"page": 2})

    assert len(kinds_on(first)) == 100 and len(kinds_on(second)) == 1
    assert "Page 2 of 2" in second.content.decode()


def test_it_labels_its_filters(client, login):
    login("viewer")

    page = client.get("/console/audit/").content.decode()

    for label in ["Kind", "Actor", "Workspace", "Key", "Created after", "Created before"]:
        assert f">{label}</label>" in page


def test_it_costs_the_same_queries_for_a_full_page(client, login, make_operation):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    login("viewer")
    make_operation(request_id="R-0")
    with CaptureQueriesContext(connection) as few:
        client.get("/console/audit/")
    for number in range(1, 40):
        make_operation(request_id=f"R-{number}")
    with CaptureQueriesContext(connection) as many:
        response = client.get("/console/audit/")

    assert len(kinds_on(response)) > 40
    assert len(many) == len(few)
