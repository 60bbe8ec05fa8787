"""CSV exports of the queue and of the audit search: streamed, with the page's filter and sort, a
header row, values masked as the operation page masks them, cells a spreadsheet cannot run as
formulas, times in UTC, and a fixed number of queries however many rows."""

import csv
import io
import itertools
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.http import StreamingHttpResponse
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger import retention
from ledger.core import accounts
from ledger.core.privacy import MASK
from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, Operation
from ledger.people import pause
from ledger.reads import exports
from tests.ledger.conftest import submit_brief

REFUND = {"version": 1, "customer_id": "C-1001", "amount_cents": 2500, "currency": "EUR"}


def refund(workspace, request_id: str = "R-1", **data) -> Operation:
    result = submit_event(
        workspace=workspace,
        source="api",
        raw={"action": "issue-refund", "data": REFUND | {"request_id": request_id} | data},
    )
    assert result.outcome == "accepted", result
    return result.operation


def exported(client, path: str, params=None) -> list[dict]:
    response = client.get(path, params or {})
    assert response.status_code == 200
    assert isinstance(response, StreamingHttpResponse)
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


def test_it_streams_the_queue_as_a_dated_attachment_with_a_header(client, login, workspace):
    refund(workspace)
    login("operator")

    response = client.get("/console/export.csv")

    assert isinstance(response, StreamingHttpResponse)
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="queue-{timezone.now():%Y-%m-%d}-UTC.csv"'
    header = next(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert header[:10] == exports.OPERATION_COLUMNS
    assert {"payload.customer_id", "payload.amount_cents", "payload.currency"} <= set(header)
    assert header[-1] == "more"


def test_the_pages_link_to_their_export_with_the_filter(client, login, workspace):
    refund(workspace)
    login("operator")

    queue = client.get("/console/", {"state": "pending_approval", "sort": "oldest"}).content.decode()
    audit = client.get("/console/audit/", {"actor": "api"}).content.decode()

    assert 'href="/console/export.csv?state=pending_approval&amp;sort=oldest" download>Export CSV</a>' in queue
    assert 'href="/console/audit/export.csv?actor=api" download>Export CSV</a>' in audit


@pytest.mark.parametrize(
    ("role", "shown"), [("viewer", False), ("operator", False), ("approver", True), ("admin", True)]
)
def test_sensitive_values_are_masked_for_whoever_may_not_see_them(client, login, workspace, role, shown):
    refund(workspace)
    login(role)

    (row,) = exported(client, "/console/export.csv")

    assert row["payload.currency"] == "EUR"
    assert row["payload.request_id"] == "R-1"
    if shown:
        assert (row["payload.customer_id"], row["payload.amount_cents"]) == ("C-1001", "2500")
    else:
        assert (row["payload.customer_id"], row["payload.amount_cents"]) == (MASK, MASK)


def test_a_superuser_sees_the_values(client, workspace, django_user_model):
    refund(workspace)
    client.force_login(django_user_model.objects.create_superuser("root", email=None, password=None))

    (row,) = exported(client, "/console/export.csv")

    assert row["payload.customer_id"] == "C-1001"


@pytest.mark.parametrize("text", ['=HYPERLINK("http://x","y")', "+1+1", "-2+3", "@SUM(A1)"])
def test_text_a_spreadsheet_would_run_is_written_as_text(client, login, workspace, text):
    brief = submit_event(
        workspace=workspace,
        source="api",
        raw={"action": "prepare-brief", "data": {"request_id": "R-1", "version": 1, "title": text, "owner": "ops"}},
    ).operation
    Operation.objects.filter(pk=brief.pk).update(state="needs_review", last_error_message=text)
    login("operator")

    (row,) = exported(client, "/console/export.csv")

    assert row["payload.title"] == "'" + text
    assert row["error_message"] == "'" + text


def test_a_cell_is_text_numbers_times_or_json():
    at = datetime(2026, 12, 1, 17, 4, 5, tzinfo=timezone.get_fixed_timezone(60))

    assert exports.cell(at) == "2026-12-01T16:04:05+00:00"
    assert exports.cell(-2500) == -2500
    assert exports.cell(2.5) == 2.5
    assert exports.cell(None) == ""
    assert exports.cell(True) == "true"
    assert exports.cell({"a": [1, "é"]}) == '{"a": [1, "é"]}'
    assert exports.cell(["=1"]) == '["=1"]'
    assert exports.cell("plain") == "plain"
    assert exports.cell("a=b") == "a=b"
    assert exports.cell("\t=1") == "'\t=1"
    assert exports.cell("\r=1") == "'\r=1"


def test_it_exports_what_the_queue_lists_with_its_filter_and_sort(client, login, workspace, make_operation):
    old, new = refund(workspace, "R-1"), refund(workspace, "R-2")
    Operation.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=2))
    review = make_operation("needs_review", request_id="N-1")
    make_operation("succeeded", request_id="S-1")
    login("approver")

    def keys(params):
        return [row["key"] for row in exported(client, "/console/export.csv", params)]

    assert set(keys({})) == {old.key, new.key, review.key}
    assert keys({"state": "pending_approval", "sort": "oldest"}) == [old.key, new.key]
    assert keys({"state": "pending_approval", "sort": "newest"}) == [new.key, old.key]
    assert keys({"action": review.action}) == [review.key]
    assert keys({"q": "R-2"}) == [new.key]
    assert keys({"state": "unknown"}) == []


def test_the_export_has_every_row_not_one_page(client, login, workspace):
    for number in range(60):
        refund(workspace, f"R-{number}")
    login("operator")

    assert len(exported(client, "/console/export.csv")) == 60


def test_the_export_of_held_work_lists_what_a_pause_holds(client, login, workspace):
    held = submit_brief(workspace, request_id="H-1")
    pause.set_paused(paused=True, reason="incident", workspace=workspace, actor="alice")
    login("operator")

    rows = exported(client, "/console/export.csv", {"state": "held"})

    assert [(row["key"], row["state"]) for row in rows] == [(held.key, "pending")]


def test_other_workspaces_are_not_exported(client, login, workspace):
    mine = refund(workspace, "R-1")
    theirs, _ = accounts.create_workspace(slug="theirs", approved_owners=["ops"], actor="test")
    refund(theirs, "R-1")
    login("approver")

    assert [row["key"] for row in exported(client, "/console/export.csv")] == [mine.key]
    assert {row["workspace"] for row in exported(client, "/console/audit/export.csv")} == {"demo"}


def test_times_are_utc_with_their_offset_in_any_zone(client, login, workspace):
    operation = refund(workspace)
    login("operator")
    client.cookies["tz"] = "Asia/Tokyo"

    (row,) = exported(client, "/console/export.csv")

    assert row["created_at (UTC)"] == operation.created_at.astimezone(UTC).isoformat()
    assert row["created_at (UTC)"].endswith("+00:00")


def test_the_audit_export_has_the_search_filter(client, login, workspace):
    pause.set_paused(paused=True, actor="alice", reason="incident", workspace=workspace)
    pause.set_paused(paused=False, actor="alice", reason="fixed", workspace=workspace)
    operation = refund(workspace)
    login("operator")

    alice = exported(client, "/console/audit/export.csv", {"actor": "ALICE"})
    refunds = exported(client, "/console/audit/export.csv", {"key": "R-1"})

    assert [row["kind"] for row in alice] == ["resumed", "paused"]  # newest first, like the page
    assert list(alice[0]) == exports.AUDIT_COLUMNS
    assert alice[0]["message"].endswith("fixed")
    assert alice[0]["workspace"] == "demo"
    assert {row["operation"] for row in refunds} == {operation.key}
    assert {row["operation_id"] for row in refunds} == {str(operation.pk)}


def test_the_audit_export_names_a_purged_operation_by_its_id(client, login, workspace):
    brief = submit_brief(workspace)
    Operation.objects.filter(pk=brief.pk).update(state="succeeded")
    retention.purge(as_of=timezone.now() + timedelta(days=400), vacuum=False)
    assert not Operation.objects.filter(pk=brief.pk).exists()
    login("operator")

    rows = [row for row in exported(client, "/console/audit/export.csv") if row["operation_id"] == str(brief.pk)]

    assert rows
    assert all(row["operation"] == "" for row in rows)


def test_the_audit_dates_are_days_in_the_persons_zone(client, login, workspace, time_machine):
    time_machine.move_to(datetime(2030, 1, 1, 23, 30, tzinfo=UTC), tick=False)  # 00:30 on the 2nd in Berlin
    pause.set_paused(paused=True, actor="alice", reason="late", workspace=workspace)
    login("operator")

    def kinds(zone):
        client.cookies["tz"] = zone
        return [
            row["kind"]
            for row in exported(client, "/console/audit/export.csv", {"actor": "alice", "created_after": "2030-01-02"})
        ]

    assert kinds("Europe/Berlin") == ["paused"]
    assert kinds("UTC") == []


def test_an_export_needs_a_member(client, login):
    assert client.get("/console/export.csv").status_code == 302
    login("nobody")
    assert client.get("/console/export.csv").status_code == 403
    assert client.get("/console/audit/export.csv").status_code == 403


def test_a_refused_filter_value_exports_as_the_page_lists(client, login, workspace):
    refund(workspace)
    login("operator")

    rows = exported(client, "/console/export.csv", {"sort": "sideways", "workspace": "999"})

    assert len(rows) == 1


def test_nothing_sensitive_is_logged_while_exporting(client, login, workspace, caplog):
    refund(workspace)
    login("approver")

    exported(client, "/console/export.csv")

    assert "C-1001" not in caplog.text


def test_the_audit_export_reads_each_event_once(client, login, workspace, django_assert_max_num_queries):
    for number in range(30):
        pause.set_paused(paused=number % 2 == 0, actor="alice", reason=f"r{number}", workspace=workspace)
    login("operator")

    with django_assert_max_num_queries(7):  # as test_query_counts.AUDIT_EXPORT_QUERIES
        rows = exported(client, "/console/audit/export.csv")

    assert len(rows) == AuditEvent.objects.count()


def test_the_rows_are_written_as_they_are_read_never_held_in_a_list(workspace):
    """Memory stays flat however long the export: the chunks come from an endless source one at a
    time, and the operations are read through ``iterator`` (the queryset keeps no result cache)."""
    endless = exports.csv_chunks(itertools.repeat(["a", 2]))
    first = next(endless)
    assert first.count("\r\n") == exports.FLUSH_ROWS
    assert first.startswith("a,2\r\n")

    refund(workspace)
    operations = Operation.objects.select_related("workspace").only(*exports.OPERATION_FIELDS)
    rows = list(exports.operation_rows(operations, user=None, actions=["issue-refund"]))
    assert len(rows) == 2
    assert operations._result_cache is None


@pytest.mark.django_db(transaction=True)
def test_the_rows_are_read_while_they_are_sent(client, login, workspace, monkeypatch):
    """In a transaction: a cursor declared in autocommit would be WITH HOLD, and PostgreSQL would
    read every row before sending the first (14 s for 2,000,000 audit events); the transaction ends
    when the client goes away."""
    for number in range(3):
        pause.set_paused(paused=number % 2 == 0, actor="alice", reason=f"r{number}", workspace=workspace)
    login("operator")
    monkeypatch.setattr(exports, "FLUSH_ROWS", 2)  # a chunk before the last row is read

    with CaptureQueriesContext(connection) as queries:
        response = client.get("/console/audit/export.csv")
        next(iter(response.streaming_content))
        assert connection.in_atomic_block
        response.close()

    assert not connection.in_atomic_block
    declared = [query["sql"] for query in queries.captured_queries if query["sql"].startswith("DECLARE")]
    assert len(declared) == 1
    assert not any("WITH HOLD" in sql for sql in declared)


@pytest.mark.django_db(transaction=True)
def test_behind_a_transaction_pooler_the_rows_are_still_read_while_they_are_sent(client, login, workspace, monkeypatch):
    """There (DATABASE_POOL_MODE=transaction) Django's server-side cursors are off, as a cursor
    declared in autocommit would be fetched from another server session; the export's is declared
    in its transaction, which the pooler keeps on one, so it still streams."""
    for number in range(3):
        pause.set_paused(paused=number % 2 == 0, actor="alice", reason=f"r{number}", workspace=workspace)
    login("operator")
    monkeypatch.setattr(exports, "FLUSH_ROWS", 2)
    monkeypatch.setitem(connection.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)

    with CaptureQueriesContext(connection) as queries:
        response = client.get("/console/audit/export.csv")
        rows = b"".join(response.streaming_content).decode().splitlines()

    assert len(rows) == 1 + AuditEvent.objects.count()
    declared = [query["sql"] for query in queries.captured_queries if query["sql"].startswith("DECLARE")]
    assert len(declared) == 1
    assert not any("WITH HOLD" in sql for sql in declared)
