"""Retention (docs/retention.md): payloads redacted after the payload window, tombstones deleted
after the key window, arrivals older than the key window refused as stale; unfinished work never
touched. Each window is tried one second inside and one second outside."""

from datetime import timedelta
from importlib import import_module
from io import StringIO

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command
from django.utils import timezone
from django_q.models import Schedule

from ledger import retention
from ledger.core import audit_verify, policies
from ledger.engine.processing import process_due_operations
from ledger.engine.schedules import PURGE_SCHEDULE
from ledger.models import Attempt, AuditEvent, Conflict, Delivery, Heartbeat, Operation, Policy, ReviewDraft
from ledger.states import State
from tests.conftest import event
from tests.ledger.conftest import START

SECOND = timedelta(seconds=1)
PAYLOAD_WINDOW = timedelta(days=30)  # prepare-brief's defaults (ActionDefinition)
KEY_WINDOW = timedelta(days=90)


def at(moment):
    return moment.isoformat()


@pytest.fixture
def finished(api, frozen):
    """One prepare-brief operation, run to succeeded at START (so both windows count from START)."""
    response = api.post("/api/v1/events", event("d-1"))
    assert response.status_code == 201
    process_due_operations()
    operation = Operation.objects.get()
    assert (operation.state, operation.updated_at) == (State.SUCCEEDED, START)
    return operation


# --- stale arrivals -----------------------------------------------------------------------------


def test_an_arrival_just_inside_the_key_window_is_taken(api, frozen):
    response = api.post("/api/v1/events", event("d-1") | {"occurred_at": at(START - KEY_WINDOW + SECOND)})

    assert response.status_code == 201, response.json()


def test_an_arrival_just_outside_the_key_window_is_refused_as_stale_and_recorded(api, frozen):
    response = api.post("/api/v1/events", event("d-1") | {"occurred_at": at(START - KEY_WINDOW - SECOND)})

    assert response.status_code == 409
    body = response.json()
    assert (body["status"], body["reason"], body["key"]) == ("blocked", "stale", "demo:R-42:v3:prepare-brief")
    assert body["errors"][0]["field"] == "occurred_at"
    assert "90d" in body["errors"][0]["message"]
    assert not Operation.objects.exists()
    delivery = Delivery.objects.get()
    assert (delivery.outcome, delivery.key, delivery.sender_delivery_id, delivery.operation) == (
        "stale",
        "demo:R-42:v3:prepare-brief",
        "d-1",
        None,
    )
    assert delivery.occurred_at == START - KEY_WINDOW - SECOND


def test_the_stale_window_follows_the_workspace_policy(api, frozen, workspace):
    policies.set_policy(
        workspace=workspace,
        action="prepare-brief",
        actor="test",
        payload_retention=timedelta(days=7),
        key_retention=timedelta(days=7),
    )

    inside = api.post("/api/v1/events", event("d-1") | {"occurred_at": at(START - timedelta(days=7) + SECOND)})
    outside = api.post(
        "/api/v1/events", event("d-2", request_id="R-43") | {"occurred_at": at(START - timedelta(days=7) - SECOND)}
    )

    assert (inside.status_code, outside.status_code) == (201, 409)
    assert outside.json()["reason"] == "stale"


def test_a_stale_event_in_a_batch_is_answered_alone(api, frozen):
    old = event("d-1") | {"occurred_at": at(START - KEY_WINDOW - SECOND)}
    new = event("d-2", request_id="R-43")

    response = api.post("/api/v1/events/batch", {"events": [old, new]})

    assert response.status_code == 200
    [first, second] = response.json()["results"]
    assert (first["reason"], first["http_status"], second["status"]) == ("stale", 409, "accepted")
    assert sorted(Delivery.objects.values_list("outcome", flat=True)) == ["accepted", "stale"]


# --- the payload window ---------------------------------------------------------------------------


def test_a_payload_is_kept_until_one_second_past_its_window(finished):
    retention.purge(as_of=START + PAYLOAD_WINDOW - SECOND)

    finished.refresh_from_db()
    assert finished.redacted_at is None
    assert finished.payload["title"] == "Review renewal options"


def test_past_the_payload_window_only_a_tombstone_remains(finished):
    before = Operation.objects.values("key", "fingerprint", "state", "external_id", "created_at", "updated_at").get()

    report = retention.purge(as_of=START + PAYLOAD_WINDOW + SECOND)

    finished.refresh_from_db()
    assert report.total("redacted") == 1
    assert finished.payload == {"request_id": "R-42", "version": 3}
    assert finished.result == {"draft_id": finished.external_id}
    assert finished.redacted_at is not None
    assert Operation.objects.values(*before).get() == before  # key, fingerprint, state, references, times


def test_a_redelivery_of_a_redacted_operation_is_still_a_duplicate_or_a_conflict(api, finished):
    retention.purge(as_of=START + PAYLOAD_WINDOW + SECOND)

    same = api.post("/api/v1/events", event("d-2"))
    changed = api.post("/api/v1/events", event("d-3", title="Something else"))

    assert (same.status_code, same.json()["status"]) == (200, "duplicate")
    assert (changed.status_code, changed.json()["reason"]) == (409, "payload_conflict")
    assert Operation.objects.count() == 1


def test_a_decided_conflicts_payload_is_redacted_with_its_operation(api, finished, alice):
    from ledger.people import conflict_decisions

    response = api.post("/api/v1/events", event("d-2", title="Something else", owner="ops"))
    conflict = Conflict.objects.get(pk=response.json()["conflict_id"])
    conflict_decisions.dismiss_conflict(conflict, user=alice, reason="the first one stands")

    retention.purge(as_of=START + PAYLOAD_WINDOW + SECOND)

    conflict.refresh_from_db()
    assert conflict.incoming_payload == {"request_id": "R-42", "version": 3}
    assert conflict.differences == [{"field": "title", "recorded": retention.REDACTED, "incoming": retention.REDACTED}]


def test_an_open_conflict_keeps_its_operation_whole(api, finished):
    api.post("/api/v1/events", event("d-2", title="Something else"))

    retention.purge(as_of=START + KEY_WINDOW + timedelta(days=1))

    finished.refresh_from_db()
    assert finished.redacted_at is None
    assert Conflict.objects.get().incoming_payload["title"] == "Something else"


# --- the key window -------------------------------------------------------------------------------


def test_a_tombstone_is_kept_until_one_second_past_the_key_window(finished):
    retention.purge(as_of=START + KEY_WINDOW - SECOND)

    assert Operation.objects.filter(pk=finished.pk, redacted_at__isnull=False).exists()


def test_past_the_key_window_the_tombstone_goes_and_its_audit_trail_stays(finished):
    events_before = AuditEvent.objects.filter(operation_id=finished.pk).count()
    draft = ReviewDraft.objects.get()

    report = retention.purge(as_of=START + KEY_WINDOW + SECOND)

    assert report.total("deleted") == 1
    assert not Operation.objects.exists()
    assert not Delivery.objects.exists()
    assert not Attempt.objects.exists()
    assert AuditEvent.objects.filter(operation_id=finished.pk).count() == events_before
    assert audit_verify.verify_chains().broken is None
    draft.refresh_from_db()
    assert (draft.title, draft.operation_id) == ("Review renewal options", None)  # the destination's record


def test_after_the_key_window_a_late_redelivery_is_stale_not_new_work(api, finished, frozen):
    retention.purge(as_of=START + KEY_WINDOW + SECOND)
    frozen.move_to(START + KEY_WINDOW + 2 * SECOND, tick=False)

    late = api.post("/api/v1/events", event("d-1") | {"occurred_at": at(START)})

    assert (late.status_code, late.json()["reason"]) == (409, "stale")
    assert not Operation.objects.exists()


def test_after_the_key_window_a_redelivery_without_occurred_at_is_new_work(api, finished, frozen):
    # The documented limit (docs/retention.md): without occurred_at the ledger cannot tell its age.
    retention.purge(as_of=START + KEY_WINDOW + SECOND)
    frozen.move_to(START + KEY_WINDOW + 2 * SECOND, tick=False)

    assert api.post("/api/v1/events", event("d-1")).status_code == 201


def test_a_tombstone_whose_delivery_occurred_within_the_key_window_is_kept(api, frozen):
    # A sender whose clock ran two days ahead: deleting at the key window would let that same event,
    # redelivered, look fresh enough to be new work.
    ahead = START + timedelta(days=2)
    api.post("/api/v1/events", event("d-1") | {"occurred_at": at(ahead)})
    process_due_operations()

    report = retention.purge(as_of=START + KEY_WINDOW + SECOND)
    assert (report.total("deleted"), report.workspaces["demo"].kept_for_occurred_at) == (0, 1)

    report = retention.purge(as_of=ahead + KEY_WINDOW + SECOND)
    assert report.total("deleted") == 1


def test_refused_deliveries_are_deleted_after_the_key_window(api, frozen):
    api.post("/api/v1/events", {"action": "prepare-brief", "data": {}})
    assert Delivery.objects.get().outcome == "invalid"

    retention.purge(as_of=START + KEY_WINDOW - SECOND)
    assert Delivery.objects.exists()
    retention.purge(as_of=START + KEY_WINDOW + SECOND)
    assert not Delivery.objects.exists()


# --- unfinished work ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "state",
    [State.PENDING, State.PENDING_APPROVAL, State.PROCESSING, State.RETRYING, State.UNKNOWN, State.NEEDS_REVIEW],
)
def test_a_purge_never_touches_unfinished_work(api, frozen, state):
    api.post("/api/v1/events", event("d-1"))
    Operation.objects.update(state=state)  # as it would stand, years later

    report = retention.purge(as_of=START + timedelta(days=3000))

    operation = Operation.objects.get()
    assert (report.total("redacted"), report.total("deleted")) == (0, 0)
    assert (operation.state, operation.redacted_at, operation.payload["title"]) == (
        state,
        None,
        "Review renewal options",
    )
    assert Delivery.objects.filter(operation=operation).exists()


# --- running it -----------------------------------------------------------------------------------


def briefs(api, count):
    for number in range(count):
        assert api.post("/api/v1/events", event(f"d-{number}", request_id=f"R-{number}")).status_code == 201
    process_due_operations()


def test_a_dry_run_counts_and_changes_nothing(api, frozen):
    briefs(api, 3)

    report = retention.purge(as_of=START + KEY_WINDOW + SECOND, dry_run=True)

    assert (report.total("redacted"), report.total("deleted")) == (3, 3)
    assert Operation.objects.filter(redacted_at__isnull=True).count() == 3
    assert not AuditEvent.objects.filter(kind="purged").exists()


def test_a_purge_works_in_chunks_and_an_interrupted_one_finishes_when_run_again(api, frozen):
    briefs(api, 5)
    lines = []

    def stop_after_the_first_chunk(line):
        lines.append(line)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        retention.purge(as_of=START + PAYLOAD_WINDOW + SECOND, chunk=2, progress=stop_after_the_first_chunk)
    assert lines == ["demo: redacted 2 payloads"]
    assert Operation.objects.filter(redacted_at__isnull=False).count() == 2  # the first chunk committed

    report = retention.purge(as_of=START + PAYLOAD_WINDOW + SECOND, chunk=2)
    assert report.total("redacted") == 3
    assert Operation.objects.filter(redacted_at__isnull=True).count() == 0
    assert retention.purge(as_of=START + PAYLOAD_WINDOW + SECOND).total("redacted") == 0


def test_a_purge_leaves_an_audited_summary_and_a_heartbeat(finished):
    retention.purge(as_of=START + KEY_WINDOW + SECOND, actor="cli")

    summary = AuditEvent.objects.get(kind="purged")
    assert (summary.actor, summary.workspace.slug, summary.operation_id) == ("cli", "demo", None)
    assert "redacted 1 payloads, deleted 1 tombstones" in summary.message
    assert Heartbeat.objects.get(name="purge").detail["deleted"] == 1


def test_the_purge_command_reports_progress_and_totals(finished, frozen):
    frozen.move_to(START + KEY_WINDOW + 2 * SECOND, tick=False)
    out = StringIO()
    call_command("purge", "--as-of", (START + KEY_WINDOW + SECOND).isoformat(), stdout=out)

    assert "demo: deleted 1 tombstones" in out.getvalue()
    assert "Did redact 1 payloads and delete 1 tombstones" in out.getvalue()
    assert not Operation.objects.exists()


def test_the_purge_command_dry_run_says_would(finished, frozen):
    frozen.move_to(START + KEY_WINDOW + 2 * SECOND, tick=False)
    out = StringIO()
    call_command("purge", "--dry-run", "--as-of", (START + KEY_WINDOW + SECOND).isoformat(), stdout=out)

    assert "Would redact 1 payloads and delete 1 tombstones" in out.getvalue()
    assert Operation.objects.exists()


@pytest.mark.parametrize(
    ("as_of", "message"),
    [
        ("yesterday", "is not a date and time"),
        ("2030-13-45T00:00+00:00", "is not a date and time"),
        ("2030-01-01T00:00", "has no UTC offset"),
        ("2999-01-01T00:00Z", "is in the future"),
    ],
)
def test_the_purge_command_refuses_a_bad_as_of(db, as_of, message):
    with pytest.raises(CommandError, match=message):
        call_command("purge", "--as-of", as_of)


def test_the_purge_runs_daily_on_the_cluster(db):
    # Written by migration 0012; a transactional test on this test database may have flushed it since,
    # so the migration's own step writes it again here.
    migration = import_module("ledger.migrations.0012_purge_schedule")
    [step] = [operation.code for operation in migration.Migration.operations if hasattr(operation, "code")]
    assert step is migration.create_schedule
    step(apps, None)
    schedule = Schedule.objects.get(name=PURGE_SCHEDULE)
    assert (schedule.func, schedule.minutes, schedule.repeats) == ("ledger.tasks.purge", 24 * 60, -1)


def test_the_scheduled_task_purges(finished, frozen):
    from ledger import tasks

    frozen.move_to(START + KEY_WINDOW + SECOND, tick=False)
    assert tasks.purge()["deleted"] == 1


# --- policies -------------------------------------------------------------------------------------


def test_the_policy_command_sets_and_shows_a_workspace_policy_audited(workspace):
    out = StringIO()
    call_command(
        "policy",
        "set",
        "--workspace",
        "demo",
        "--action",
        "issue-refund",
        "--payload-retention",
        "7d",
        "--key-retention",
        "400d",
        stdout=out,
    )

    assert (
        "issue-refund: payload retention 7d (workspace), key retention 400d (workspace), "
        "ordering independent (definition)" in out.getvalue()
    )
    policy = policies.policy_for(workspace.pk, "issue-refund")
    assert (policy.payload_retention, policy.key_retention) == (timedelta(days=7), timedelta(days=400))
    changed = AuditEvent.objects.get(kind="policy_changed")
    assert changed.message == "issue-refund in demo: payload_retention inherited -> 7d; key_retention inherited -> 400d"


def test_a_workspace_policy_overrides_the_every_workspace_one_field_by_field(workspace):
    policies.set_policy(workspace=None, action="file-ticket", actor="test", key_retention=timedelta(days=180))
    policies.set_policy(workspace=workspace, action="file-ticket", actor="test", payload_retention=timedelta(days=1))

    policy = policies.policy_for(workspace.pk, "file-ticket")

    assert (policy.payload_retention, policy.key_retention) == (timedelta(days=1), timedelta(days=180))
    assert dict(policy.sources)["key_retention"] == "every workspace"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--payload-retention", "7 weeks"], "is not a duration"),
        (["--payload-retention", "0d"], "is not a duration"),
        (["--key-retention", "99999999999999d"], "is not a duration"),
        (["--key-retention", "1d"], "in demo, the key window \\(1d\\) would be shorter than the payload window"),
        ([], "Say what to change"),
    ],
)
def test_the_policy_command_refuses_what_cannot_be_and_writes_nothing(workspace, args, message):
    with pytest.raises(CommandError, match=message):
        call_command("policy", "set", "--workspace", "demo", "--action", "prepare-brief", *args)

    assert not Policy.objects.exists()
    assert not AuditEvent.objects.filter(kind="policy_changed").exists()


def test_the_policy_command_names_an_unknown_workspace_or_action(workspace):
    with pytest.raises(CommandError, match="No workspace 'nope'"):
        call_command("policy", "show", "--workspace", "nope")
    with pytest.raises(CommandError, match="Unknown action 'nope'"):
        call_command("policy", "set", "--action", "nope", "--key-retention", "1d")


def test_a_change_for_every_workspace_is_refused_where_it_would_break_a_workspace(workspace):
    policies.set_policy(
        workspace=workspace,
        action="send-notice",
        actor="test",
        payload_retention=timedelta(days=60),
        key_retention=policies.INHERIT,
    )

    with pytest.raises(CommandError, match="in demo, the key window \\(50d\\) would be shorter"):
        call_command("policy", "set", "--action", "send-notice", "--key-retention", "50d")

    assert not Policy.objects.filter(workspace=None).exists()


def test_inherit_clears_a_field(workspace):
    call_command("policy", "set", "--workspace", "demo", "--action", "send-notice", "--key-retention", "400d")
    call_command("policy", "set", "--workspace", "demo", "--action", "send-notice", "--key-retention", "inherit")

    assert policies.policy_for(workspace.pk, "send-notice").key_retention == timedelta(days=90)
    assert AuditEvent.objects.filter(kind="policy_changed").last().message == (
        "send-notice in demo: key_retention 400d -> inherited"
    )


def test_every_table_that_refers_to_an_operation_is_deleted_detached_or_unconstrained():
    """A new relation to Operation must be handled by the purge, or deleting a tombstone fails."""
    from django.db import models

    for relation in retention.referring_relations():
        handled = (
            relation.related_model in retention.OWNED
            or relation.on_delete is models.SET_NULL
            or (relation.on_delete is models.DO_NOTHING and not relation.field.db_constraint)
        )
        assert handled, f"{relation.related_model.__name__}.{relation.field.name} is not handled by the purge"


def test_a_latest_status_outlives_its_operation(api, frozen):
    from ledger.models import RequestStatus

    api.post(
        "/api/v1/events", {"action": "update-status", "data": {"request_id": "R-7", "version": 1, "status": "closed"}}
    )
    process_due_operations()

    report = retention.purge(as_of=START + KEY_WINDOW + SECOND)

    assert (report.total("deleted"), report.workspaces["demo"].skipped_chunks) == (1, 0)
    status = RequestStatus.objects.get()
    assert (status.status, status.operation_id) == ("closed", None)


def test_a_cancelled_operation_without_a_result_is_redacted_too(api, frozen, alice):
    from ledger.people import cancellations

    api.post("/api/v1/events", event("d-1"))
    cancellations.cancel_operation(Operation.objects.get(), user=alice, reason="not needed")

    assert retention.purge(as_of=START + PAYLOAD_WINDOW + SECOND).total("redacted") == 1

    operation = Operation.objects.get()
    assert (operation.state, operation.result, operation.payload) == (
        "cancelled",
        None,
        {"request_id": "R-42", "version": 3},
    )


@pytest.mark.django_db(transaction=True)
def test_a_purge_that_changed_rows_vacuums_what_it_wrote(workspace):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from ledger.intake.submit import submit_event

    submit_event(workspace=workspace, raw=event("d-1"), source="api")
    process_due_operations()

    with CaptureQueriesContext(connection) as queries:
        report = retention.purge(as_of=timezone.now() + KEY_WINDOW + timedelta(days=1))

    assert report.total("deleted") == 1
    [vacuum] = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("VACUUM")]
    assert "ledger_reviewdraft" in vacuum
    assert "ledger_operation" in vacuum
