"""The audit page lists audit events newest first, filtered by kind, actor, workspace, key and dates."""

import html
import re
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from ledger.core import accounts, audit_partitions
from ledger.models import AuditArchive, AuditEvent
from ledger.people import pause
from opsconsole.console.templatetags.console_time import when


def kinds_on(response) -> list[str]:
    rows = re.findall(
        r"<tr>\s*<td[^>]*>(?:<time[^>]*>)?[^<]*(?:</time>)?</td>\s*<td>([^<]*)</td>\s*<td>([^<]*)</td>",
        response.content.decode(),
    )
    return [f"{actor}:{kind}" for actor, kind in rows]


def test_it_lists_events_newest_first_with_links_to_their_operations(client, login, workspace, make_operation):
    login("viewer")
    operation = make_operation()
    pause.set_paused(paused=True, actor="alice", reason="incident", workspace=workspace)

    response = client.get("/console/audit/")

    assert kinds_on(response)[0] == "alice:paused"
    assert f'<a href="/console/operations/{operation.pk}/">{operation.key}</a>' in response.content.decode()


def test_it_filters_by_kind_actor_workspace_and_key(client, login, workspace, make_operation):
    login("viewer")
    first = make_operation(request_id="INV-1")
    make_operation(request_id="INV-2")
    other, _ = accounts.create_workspace(slug="other", approved_owners=[], actor="bob")
    pause.set_paused(paused=True, actor="alice", reason="incident", workspace=workspace)

    assert kinds_on(client.get("/console/audit/", {"kind": "paused"})) == ["alice:paused"]
    assert kinds_on(client.get("/console/audit/", {"actor": "ALICE"})) == ["alice:paused"]
    assert kinds_on(client.get("/console/audit/", {"actor": "ali"})) == []  # a whole name, not a part
    # Another workspace's events are not shown, even when asked for by its id.
    assert "bob:token_issued" not in kinds_on(client.get("/console/audit/", {"workspace": other.pk}))
    assert kinds_on(client.get("/console/audit/", {"workspace": workspace.pk}))[0] == "alice:paused"
    keyed = client.get("/console/audit/", {"key": "INV-1"})
    assert len(kinds_on(keyed)) == AuditEvent.objects.filter(operation=first).count() > 0
    assert "INV-2" not in keyed.content.decode()


def test_it_filters_by_dates_inclusively(client, login, workspace, time_machine):
    for day in (1, 2, 3):
        time_machine.move_to(datetime(2030, 1, day, 12, tzinfo=UTC), tick=False)
        pause.set_paused(paused=True, actor="scheduler", reason="r", workspace=workspace)
        pause.set_paused(paused=False, actor="scheduler", reason="r", workspace=workspace)
    login("viewer")  # after moving the clock, so the session has not expired

    def days_on(response) -> list[str]:
        rows = re.findall(
            r'<td class="when"><time [^>]*>2030-01-0(\d) [^<]*</time></td>\s*<td>scheduler</td>\s*'
            r"<td>([^<]*)</td>",
            response.content.decode(),
        )
        return [f"day{day}:{kind}" for day, kind in rows]

    days = {"actor": "scheduler"}  # not the workspace's own creation, which happened today
    after = days_on(client.get("/console/audit/", days | {"created_after": "2030-01-02"}))
    before = days_on(client.get("/console/audit/", days | {"created_before": "2030-01-02"}))
    both = days_on(
        client.get("/console/audit/", days | {"created_after": "2030-01-02", "created_before": "2030-01-02"})
    )

    assert {row.split(":")[0] for row in after} == {"day2", "day3"}
    assert {row.split(":")[0] for row in before} == {"day1", "day2"}
    assert both == ["day2:resumed", "day2:paused"]


def link(response, label: str) -> str | None:
    found = re.search(rf'<a href="([^"]*)"[^>]*>[^<]*{label}[^<]*</a>', response.content.decode())
    return "/console/audit/" + html.unescape(found.group(1)) if found else None


def test_it_pages_by_a_hundred_with_older_and_newer_links(client, login, workspace):
    login("viewer")
    events = AuditEvent.objects.filter(workspace=workspace).count()  # the workspace's own creation
    for number in range(101 - events):
        pause.set_paused(paused=number % 2 == 0, actor="a", reason="r", workspace=workspace)

    first = client.get("/console/audit/")
    second = client.get(link(first, "Older"))
    back = client.get(link(second, "Newer"))

    assert len(kinds_on(first)) == 100
    assert len(kinds_on(second)) == 1
    assert link(first, "Newer") is None
    assert link(second, "Older") is None
    assert kinds_on(back) == kinds_on(first) == kinds_on(client.get(link(second, "Newest")))
    assert "events" not in first.content.decode().lower().split("<table")[0]  # nothing counts them


def test_it_pages_through_events_of_the_same_instant_without_gaps_or_repeats(client, login, workspace, time_machine):
    """Rows that share a time are told apart by id: the cursor carries both."""
    time_machine.move_to(datetime(2030, 1, 7, 9, tzinfo=UTC), tick=False)
    login("viewer")
    for number in range(250):
        pause.set_paused(paused=number % 2 == 0, actor=f"p{number}", reason="r", workspace=workspace)
    expected = list(
        AuditEvent.objects.filter(workspace=workspace).order_by("-created_at", "-id").values_list("actor", "kind")
    )

    seen, response = [], client.get("/console/audit/")
    while True:
        seen += [tuple(row.split(":", 1)) for row in kinds_on(response)]
        if link(response, "Older") is None:
            break
        response = client.get(link(response, "Older"))

    assert seen == expected
    assert len(seen) == 252  # and the workspace's own two: created, its token


def test_it_keeps_the_filters_in_its_links(client, login, workspace):
    login("viewer")
    for number in range(220):
        pause.set_paused(paused=number % 2 == 0, actor="alice", reason="r", workspace=workspace)

    first = client.get("/console/audit/", {"actor": "alice", "kind": "paused"})
    older = client.get(link(first, "Older"))

    assert "actor=alice" in link(first, "Older")
    assert "kind=paused" in link(first, "Older")
    assert kinds_on(first) == ["alice:paused"] * 100
    assert kinds_on(older) == ["alice:paused"] * 10


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "yesterday",
        "2030-01-07T09:00:00.000000Z",
        "2030-13-07T09:00:00.000000Z_1",
        "2030-01-07T09:00:00.000000Z_x",
        "2030-01-07T09:00:00.000000Z_" + "9" * 30,
        "\x00",
    ],
)
def test_it_starts_at_the_newest_for_a_cursor_it_cannot_read(client, login, workspace, cursor):
    pause.set_paused(paused=True, actor="alice", reason="r", workspace=workspace)
    login("viewer")

    response = client.get("/console/audit/", {"older": cursor})

    assert response.status_code == 200
    assert kinds_on(response)[0] == "alice:paused"


def test_it_labels_its_filters(client, login):
    login("viewer")

    page = client.get("/console/audit/").content.decode()

    for label in ["Kind", "Actor", "Workspace", "Key or request id", "Created after", "Created before"]:
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


def test_an_event_of_a_purged_operation_still_shows_without_its_link(client, login, workspace, make_operation):
    from datetime import timedelta

    from django.utils import timezone

    from ledger import retention
    from ledger.models import Operation

    login("viewer")
    operation = make_operation()
    Operation.objects.filter(pk=operation.pk).update(state="succeeded")

    retention.purge(as_of=timezone.now() + timedelta(days=91))

    page = client.get("/console/audit/").content.decode()
    assert not Operation.objects.exists()
    assert f"#{operation.pk}, purged" in page
    assert f"/console/operations/{operation.pk}/" not in page


def test_the_kind_filter_offers_the_kinds_the_code_writes_by_topic(client, login, workspace):
    """A select, not free text: every listed kind under its topic, "All kinds" first, the chosen
    one selected again on the filtered page."""
    from ledger.models.audit import AUDIT_KIND_GROUPS

    login("viewer")
    pause.set_paused(paused=True, actor="alice", reason="incident", workspace=workspace)

    page = client.get("/console/audit/", {"kind": "paused"}).content.decode()

    select = re.search(r'<select name="kind"[^>]*>(.*?)</select>', page, re.DOTALL)[1]
    assert re.findall(r'<optgroup label="([^"]*)"', select) == [html.escape(topic) for topic in AUDIT_KIND_GROUPS]
    assert re.findall(r'<option value="([^"]*)"', select) == ["", *(k for ks in AUDIT_KIND_GROUPS.values() for k in ks)]
    assert '<option value="">All kinds</option>' in select
    assert '<option value="paused" selected>paused</option>' in select


def test_a_kind_not_on_the_list_is_a_form_error_that_says_so(client, login, workspace):
    """An old link with a kind the code does not write (or a typo): the field says what is wrong."""
    login("viewer")

    response = client.get("/console/audit/", {"kind": "pausd"})

    assert re.findall(r'<span class="field-error">([^<]*)</span>', response.content.decode()) == [
        "Select a valid choice. pausd is not one of the available choices."
    ]


def test_it_says_from_when_the_trail_is_in_files_once_a_month_is_archived(client, login, workspace, tmp_path):
    """A person searching for an old event must not take "no events" for "nothing happened"."""
    login("viewer")
    assert "archived-note" not in client.get("/console/audit/").content.decode()
    now = timezone.now()
    first_of_month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    audit_partitions.ensure_range(first_of_month - timedelta(days=40), first_of_month - timedelta(days=1))

    call_command("archive_audit", str(tmp_path), stdout=StringIO())
    page = client.get("/console/audit/").content.decode()

    note = re.search(r'<p class="hint" id="archived-note">(.*?)</p>', page, re.S).group(1)
    archived = AuditArchive.objects.get()
    assert note.startswith(f"Events before {when(archived.ends)} were archived to files")
