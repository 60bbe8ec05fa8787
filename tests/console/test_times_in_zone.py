"""Times kept as data (``ledger.timed``) read in the person's zone everywhere the console shows a
stored text: the audit page, the operation page's audit trail and last error; the API writes them as
ISO 8601 with their offset; the CSV exports in UTC, which their header and file name say. Texts of
before, with their times as words, read as they were written."""

import csv
import io
import re
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from ledger.core.transitions import record_audit_event
from ledger.models import AuditEvent, Operation
from tests.ledger.conftest import START
from tests.ledger.test_times_as_data import fail_a_lookup, open_the_breaker

BERLIN = "Europe/Berlin"


def shown(moment, zone=BERLIN) -> str:
    """A time as the console writes it: a <time> element, in ``zone`` with the zone's name."""
    local = timezone.localtime(moment, timezone=ZoneInfo(zone))
    return f'<time datetime="{local.isoformat(timespec="seconds")}">{local:%Y-%m-%d %H:%M:%S} {local.tzname()}</time>'


@pytest.fixture
def frozen(time_machine):
    """Time stands still at START (a winter Monday: Berlin is CET, UTC+1)."""
    time_machine.move_to(START, tick=False)
    return time_machine


@pytest.fixture
def failed_lookup(workspace, scripted_action, frozen, settings) -> Operation:
    settings.OPSCONSOLE_RECONCILE_GIVE_UP_SECONDS = 3600
    operation, _ = fail_a_lookup(workspace, scripted_action, frozen)
    operation.refresh_from_db()
    return operation


def test_a_person_in_berlin_reads_the_next_lookup_and_give_up_in_cet(client, login, failed_lookup):
    login("viewer")
    client.cookies["tz"] = BERLIN
    next_lookup, give_up = failed_lookup.next_attempt_at, START + timedelta(hours=1)

    audit = client.get("/console/audit/").content.decode()
    page = client.get(f"/console/operations/{failed_lookup.pk}/").content.decode()

    sentence = f"next lookup at {shown(next_lookup)}, gives up at {shown(give_up)}"
    assert "2030-01-07 11:00:00 CET" in shown(give_up)  # 10:00 UTC
    assert sentence in audit
    assert sentence in page
    # The banner beside it, from the operation's own fields, agrees.
    assert f"it keeps asking until {shown(give_up)}" in page
    assert "UTC" not in re.sub(r"<[^>]+>", "", audit.split("<table>", 1)[1])


def test_without_a_zone_the_same_times_read_in_utc(client, login, failed_lookup):
    login("viewer")

    audit = client.get("/console/audit/").content.decode()

    assert f"gives up at {shown(START + timedelta(hours=1), 'UTC')}" in audit
    assert "2030-01-07 10:00:00 UTC" in audit


def test_a_held_operations_last_error_reads_in_the_persons_zone(client, login, workspace, scripted_action, frozen):
    action = open_the_breaker(workspace, scripted_action)
    held = Operation.objects.filter(action=action.name, state="retrying", attempts=0).first()
    login("viewer")
    client.cookies["tz"] = BERLIN

    page = client.get(f"/console/operations/{held.pk}/").content.decode()

    paused = f"calls to {action.name} paused until {shown(START + timedelta(seconds=30))} (circuit breaker)"
    assert paused in page
    assert "{paused_until}" not in page


def test_the_api_writes_a_kept_time_in_iso_8601_with_its_offset(api, workspace, scripted_action, frozen):
    action = open_the_breaker(workspace, scripted_action)
    held = Operation.objects.filter(action=action.name, state="retrying", attempts=0).first()

    answer = api.get(f"/api/v1/operations/{held.key}").json()

    assert answer["last_error"]["message"] == (
        f"calls to {action.name} paused until 2030-01-07T09:00:30+00:00 (circuit breaker)"
    )


def test_texts_of_before_read_as_they_were_written(client, login, workspace):
    """An event of before keeps its time in its words and has no times: shown as it is, escaped."""
    record_audit_event(
        actor="reconciler",
        kind="lookup_failed",
        workspace=workspace,
        message="lookup 1 could not tell (<b>503</b>); next lookup at 2026-12-04 08:35:47 UTC, "
        "gives up at {give_up_at}",
    )
    assert AuditEvent.objects.get(kind="lookup_failed").times is None
    login("viewer")
    client.cookies["tz"] = BERLIN

    audit = client.get("/console/audit/").content.decode()

    assert (
        "lookup 1 could not tell (&lt;b&gt;503&lt;/b&gt;); next lookup at 2026-12-04 08:35:47 UTC, "
        "gives up at {give_up_at}"
    ) in audit


def test_the_audit_export_says_utc_in_its_header_and_name_and_writes_kept_times_so(client, login, failed_lookup):
    login("viewer")
    client.cookies["tz"] = BERLIN

    response = client.get("/console/audit/export.csv")

    assert response["Content-Disposition"] == f'attachment; filename="audit-{timezone.now():%Y-%m-%d}-UTC.csv"'
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert "created_at (UTC)" in rows[0]
    [failed] = [row for row in rows if row["kind"] == "lookup_failed"]
    assert failed["created_at (UTC)"].endswith("+00:00")
    assert failed["message"].endswith(
        f"next lookup at {failed_lookup.next_attempt_at.isoformat(timespec='seconds')}, "
        "gives up at 2030-01-07T10:00:00+00:00"
    )


def test_the_queue_export_says_utc_in_its_header_and_name(client, login, workspace, scripted_action, frozen):
    open_the_breaker(workspace, scripted_action)
    login("operator")
    client.cookies["tz"] = BERLIN

    response = client.get("/console/export.csv")

    assert response["Content-Disposition"] == f'attachment; filename="queue-{timezone.now():%Y-%m-%d}-UTC.csv"'
    header = next(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert {"created_at (UTC)", "updated_at (UTC)"} <= set(header)
