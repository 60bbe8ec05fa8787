"""The mismatches page as a work list: filters, counts by kind, "select all N matching" across
pages, acknowledging many with one reason and looking the missing records up at the destination
(a lookup bulk action the workers run, which sends nothing); each decision all or nothing, for the
people who may review in every mismatch's workspace only."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger.core import accounts
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, BulkAction, BulkItem, Membership
from ledger.people.bulk_actions import run_bulk_action
from ledger.people.review import ReviewError
from ledger.states import State
from opsconsole.console.mismatches import PAGE_SIZE
from reconciliation import mismatches as decisions
from reconciliation.models import Mismatch, ReconciliationRun
from tests.conftest import external_event
from tests.console.test_mismatches import mismatch, operation_in
from tests.console.test_sensitive_notes import refund, refused


@pytest.fixture
def run(db):
    now = timezone.now()
    return ReconciliationRun.objects.create(
        started_at=now, since=now - timedelta(hours=24), until=now, status="succeeded"
    )


def many(run, workspace, count, kind="unknown_to_ledger", **fields):
    return [
        Mismatch.objects.create(
            run=run,
            workspace=workspace,
            action=fields.get("action", "send-notice"),
            destination=fields.get("destination", "http://127.0.0.1:9"),
            kind=kind,
            reference=f"demo:R-{kind}-{number}:v1:send-notice",
            record_id=f"rec-{number}",
        )
        for number in range(count)
    ]


def page_of(client, query=""):
    response = client.get(f"/console/mismatches/{query}")
    assert response.status_code == 200
    return response.content.decode()


def statuses():
    return sorted(Mismatch.objects.values_list("status", flat=True))


def test_the_filters_narrow_the_list_and_the_counts_say_how_many_of_each_kind(client, login, run, workspace):
    login("operator")
    many(run, workspace, 3, kind="unknown_to_ledger")
    many(run, workspace, 2, kind="content_differs", action="file-ticket", destination="http://elsewhere:80")
    old = many(run, workspace, 1, kind="missing_at_destination")
    Mismatch.objects.filter(pk=old[0].pk).update(created_at=timezone.now() - timedelta(days=3))

    everything = page_of(client)
    tickets = page_of(client, "?action=file-ticket")
    elsewhere = page_of(client, "?destination=http://elsewhere:80&kind=content_differs")
    older = page_of(client, "?age=older")
    recent = page_of(client, "?age=hour")

    assert "6 open mismatches" in everything
    assert 'data-kind="unknown_to_ledger"' in everything
    assert 'Unknown to ledger <span class="tab-count">3</span>' in everything
    assert "2 open mismatches match the filter" in tickets
    assert "2 open mismatches match the filter" in elsewhere
    assert 'Unknown to ledger <span class="tab-count">0</span>' in elsewhere  # not at that destination
    assert 'Unknown to ledger <span class="tab-count">3</span>' in page_of(client, "?kind=content_differs")
    assert "1 open mismatch match the filter" in older
    assert f'id="mismatch-{old[0].pk}"' in older
    assert "5 open mismatches match the filter" in recent
    assert '<option value="file-ticket">file-ticket</option>' in everything
    assert '<option value="http://elsewhere:80">http://elsewhere:80</option>' in everything


def test_a_filter_value_not_offered_is_said_and_lists_everything(client, login, run, workspace):
    login("operator")
    many(run, workspace, 2)

    html = page_of(client, "?kind=nonsense")

    assert "Select a valid choice. nonsense is not one of the available choices." in html
    assert "2 open mismatches" in html


def test_select_all_n_matching_acknowledges_every_page_with_one_reason(client, login, run, workspace):
    login("operator")
    chosen = many(run, workspace, PAGE_SIZE + 10, kind="unknown_to_ledger")
    other_kind = many(run, workspace, 2, kind="content_differs")
    html = page_of(client, "?kind=unknown_to_ledger")
    assert f"Select all {PAGE_SIZE + 10} matching" in html
    matching = _hidden_inputs(html)

    response = client.post(
        "/console/mismatches/decide/",
        {**matching, "all_matching": "on", "decision": "acknowledge", "reason": "test records made by hand"},
        follow=True,
    )

    assert f"Acknowledged {PAGE_SIZE + 10} mismatches" in response.content.decode()
    assert set(Mismatch.objects.filter(pk__in=[m.pk for m in chosen]).values_list("status", "note")) == {
        ("acknowledged", "test records made by hand")
    }
    assert set(Mismatch.objects.filter(pk__in=[m.pk for m in other_kind]).values_list("status", flat=True)) == {"open"}
    assert AuditEvent.objects.filter(kind="mismatch_acknowledged", actor="operator").count() == PAGE_SIZE + 10


def test_select_all_is_refused_when_the_list_changed_since_it_was_counted(client, login, run, workspace):
    login("operator")
    many(run, workspace, PAGE_SIZE + 1)
    matching = _hidden_inputs(page_of(client))
    Mismatch.objects.create(
        run=run, workspace=workspace, action="send-notice", kind="unknown_to_ledger", reference="demo:late"
    )

    response = client.post(
        "/console/mismatches/decide/",
        {**matching, "all_matching": "on", "decision": "acknowledge", "reason": "ok"},
        follow=True,
    )

    assert f"you saw {PAGE_SIZE + 1} mismatches, it now holds {PAGE_SIZE + 2}" in response.content.decode()
    assert set(statuses()) == {"open"}


def test_ticked_rows_are_acknowledged_and_a_reason_is_required(client, login, run, workspace):
    login("operator")
    first, second, third = many(run, workspace, 3)

    without = client.post(
        "/console/mismatches/decide/",
        {"mismatch": [first.pk, second.pk], "decision": "acknowledge", "reason": " ", "token": "t1"},
        follow=True,
    )
    assert "Give a reason" in without.content.decode()
    assert set(statuses()) == {"open"}

    client.post(
        "/console/mismatches/decide/",
        {"mismatch": [first.pk, second.pk], "decision": "acknowledge", "reason": "seen", "token": "t1"},
    )
    assert statuses() == ["acknowledged", "acknowledged", "open"]


def test_another_workspaces_mismatch_in_the_selection_is_not_found_and_nothing_changes(client, login, run, workspace):
    login("operator")
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    [mine] = many(run, workspace, 1)
    [theirs] = many(run, other, 1)

    for decision in ("acknowledge", "lookup"):
        response = client.post(
            "/console/mismatches/decide/",
            {"mismatch": [mine.pk, theirs.pk], "decision": decision, "reason": "mine", "token": f"t-{decision}"},
        )
        assert response.status_code == 404
    assert set(statuses()) == {"open"}
    assert not BulkAction.objects.exists()


def test_a_viewer_may_not_decide_in_bulk(client, login, run, workspace):
    login("viewer")
    [m] = many(run, workspace, 1)

    html = page_of(client)
    response = client.post(
        "/console/mismatches/decide/", {"mismatch": [m.pk], "decision": "acknowledge", "reason": "x", "token": "t"}
    )

    assert "Decide the selected mismatches" not in html
    assert response.status_code == 403
    assert statuses() == ["open"]


def test_a_bulk_reason_quoting_a_sensitive_value_is_refused_and_nothing_is_written(client, login, run, workspace):
    login("operator")
    operation = refund(workspace, State.SUCCEEDED)
    [plain] = many(run, workspace, 1)
    sensitive = mismatch(run, workspace, "missing_at_destination", operation=operation, record_id="")

    refused(
        client,
        "/console/mismatches/decide/",
        {
            "mismatch": [plain.pk, sensitive.pk],
            "decision": "acknowledge",
            "reason": "refund of 45.00 is known",
            "token": "t",
        },
        field_id="bulk-reason",
        text="refund of 45.00 is known",
        field="amount_cents",
    )


def test_acknowledging_many_is_all_or_nothing_when_one_was_decided_meanwhile(run, workspace, django_user_model):
    user = django_user_model.objects.create_superuser("root", password="pw")
    first, second = many(run, workspace, 2)
    decisions.acknowledge_mismatch(second, user=user, reason="by hand")

    with pytest.raises(ReviewError, match="already decided; nothing was changed"):
        decisions.acknowledge_mismatches([first.pk, second.pk], user=user, reason="both")

    first.refresh_from_db()
    assert first.status == "open"
    assert AuditEvent.objects.filter(kind="mismatch_acknowledged").count() == 1


def test_only_missing_records_are_looked_up(run, workspace, django_user_model):
    user = django_user_model.objects.create_superuser("root", password="pw")
    operation = operation_in(workspace, "succeeded")
    missing = mismatch(run, workspace, "missing_at_destination", operation=operation, record_id="")
    [unknown] = many(run, workspace, 1)

    with pytest.raises(ReviewError, match="1 of the 2 mismatches selected are not missing at the destination"):
        decisions.look_up_mismatches([missing.pk, unknown.pk], user=user, token="t")

    assert not BulkAction.objects.exists()


def succeeded_at_standin(workspace, request_id):
    operation = submit_event(
        workspace=workspace,
        source="api",
        raw=external_event("file-ticket", delivery_id=f"d-{request_id}", request_id=request_id),
    ).operation
    process_due_operations(worker="w1")
    operation.refresh_from_db()
    assert operation.state == "succeeded"
    return operation


def test_a_bulk_lookup_asks_by_key_sends_nothing_and_shows_each_answer(
    client, login, run, workspace, standin, time_machine
):
    """Two "missing" records: one the destination has after all, one it does not. The lookup asks
    about each (GET /records), creates nothing, changes no operation, and the page shows the
    answers; Replay is offered for the one confirmed absent only."""
    login("operator")
    kept = succeeded_at_standin(workspace, "R-1")
    lost = succeeded_at_standin(workspace, "R-2")
    standin.http.post("/_delete", json={"id": lost.external_id}).raise_for_status()
    time_machine.move_to(timezone.now() + timedelta(minutes=5))
    found_one = mismatch(run, workspace, "missing_at_destination", operation=kept, record_id="")
    absent_one = mismatch(run, workspace, "missing_at_destination", operation=lost, record_id="")
    page_of(client)  # the page renders before any lookup
    creates = standin.requests()

    response = client.post(
        "/console/mismatches/decide/",
        {"mismatch": [found_one.pk, absent_one.pk], "decision": "lookup", "reason": "", "token": "look-1"},
    )
    bulk = BulkAction.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/console/bulk/{bulk.pk}/"
    assert (bulk.kind, bulk.total, bulk.operation_ids) == ("lookup", 2, [kept.pk, lost.pk])
    run_bulk_action(bulk.pk)

    bulk.refresh_from_db()
    assert (bulk.status, bulk.done, bulk.skipped) == ("finished", 2, 0)
    assert dict(BulkItem.objects.values_list("operation_id", "outcome")) == {kept.pk: "found", lost.pk: "absent"}
    assert standin.requests() == creates  # nothing sent
    assert standin.requests("GET /records") == 2
    kept.refresh_from_db()
    lost.refresh_from_db()
    assert (kept.state, lost.state) == ("succeeded", "succeeded")
    assert AuditEvent.objects.filter(kind="looked_up", actor="operator").count() == 2
    assert set(statuses()) == {"open"}  # a lookup decides nothing

    html = page_of(client)
    found_only = page_of(client, "?lookup=found")
    assert 'data-lookup="found"' in html
    assert f"the destination has record {kept.external_id}" in html
    assert 'data-lookup="absent"' in html
    assert html.count("Replay (confirmed absent)") == 1
    assert f'action="/console/mismatches/{absent_one.pk}/acknowledge/"' in html
    assert f"/console/mismatches/{absent_one.pk}/replay/" in html
    assert f"/console/mismatches/{found_one.pk}/replay/" not in html
    assert f'id="mismatch-{found_one.pk}"' in found_only
    assert f'id="mismatch-{absent_one.pk}"' not in found_only

    progress = client.get(f"/console/bulk/{bulk.pk}/").content.decode()
    assert "2 answered (found or absent), 0 not answered" in progress
    again = client.post(
        "/console/mismatches/decide/",
        {"mismatch": [found_one.pk, absent_one.pk], "decision": "lookup", "token": "look-1"},
        follow=True,
    )
    assert "This form was already submitted" in again.content.decode()
    assert BulkAction.objects.count() == 1


def test_a_destination_reset_is_shown_with_its_numbers_and_window(client, login, run, workspace):
    login("operator")
    Mismatch.objects.create(
        run=run,
        workspace=workspace,
        action="",
        destination="http://127.0.0.1:8001",
        kind="destination_reset",
        reference="http://127.0.0.1:8001",
        evidence={"unlisted": 1582, "succeeded": 1582, "records_listed": 0, "actions": ["file-ticket"]},
    )

    html = page_of(client)

    assert "The destination lists none of the 1,582 records the ledger holds for this window (" in html
    assert "): was it reset?" in html
    # The window is 24 hours: both ends carry their date.
    since, until = timezone.localtime(run.since), timezone.localtime(run.until)
    assert f">{since:%Y-%m-%d %H:%M}</time> – <time" in html
    assert f">{until:%Y-%m-%d %H:%M}</time>" in html


def _hidden_inputs(html: str) -> dict:
    fields = dict(re.findall(r'<input type="hidden" name="(matching\w*|token)" value="([^"]*)"', html))
    fields["matching"] = fields.get("matching", "").replace("&amp;", "&")
    assert fields.get("matching_digest"), "no select-all-matching on the page"
    return fields


def test_the_page_reads_as_many_queries_for_5_rows_as_for_40(client, login, run, workspace):
    login("operator")

    def queries_for(count):
        Mismatch.objects.all().delete()
        for kind in ("unknown_to_ledger", "missing_at_destination"):
            many(run, workspace, count // 2, kind=kind)
        with CaptureQueriesContext(connection) as captured:
            page_of(client, "?age=day")
        return len(captured)

    assert queries_for(5) == queries_for(40)


def test_select_all_takes_only_the_mismatches_the_person_may_decide(client, login, run, workspace):
    """An operator here and a viewer there sees both workspaces' mismatches, ticks all matching,
    and acknowledges those of the workspace where they may decide; the others stay open."""
    user = login("operator")
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    Membership.objects.create(user=user, workspace=other, role="viewer")
    mine = many(run, workspace, PAGE_SIZE)
    theirs = many(run, other, 5)
    html = page_of(client)
    assert f"{PAGE_SIZE + 5} open mismatches" in html
    assert f"Select all {PAGE_SIZE} matching" in html

    client.post(
        "/console/mismatches/decide/",
        {**_hidden_inputs(html), "all_matching": "on", "decision": "acknowledge", "reason": "seen"},
    )

    assert set(Mismatch.objects.filter(pk__in=[m.pk for m in mine]).values_list("status", flat=True)) == {
        "acknowledged"
    }
    assert set(Mismatch.objects.filter(pk__in=[m.pk for m in theirs]).values_list("status", flat=True)) == {"open"}
