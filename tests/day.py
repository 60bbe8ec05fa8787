"""A day of the demo's in one process, for the tests that read every page: its set-up, a short day of
events against the stand-in failing in each of its ways, and a person's decisions of every kind, so the
database holds a row of each kind (operations in every state, held and plain conflicts, a mismatch,
a bulk action, pauses, samples, the task queue's and the login throttle's own rows)."""

import base64
import io
import random
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from django_q.models import Schedule, Task
from django_q.tasks import async_task

from ledger.core import audit_archive, audit_partitions, policies
from ledger.engine.processing import process_due_operations
from ledger.intake import submit
from ledger.management.commands.demo_day import plan_day
from ledger.migration_helpers import ensure_schedule
from ledger.models import Conflict, Delivery, DestinationSlot, Membership, Operation, Role, Workspace
from ledger.people import (
    approvals,
    assignment,
    bulk_actions,
    cancellations,
    conflict_decisions,
    holds,
    pause,
    resolutions,
)
from ledger.reads import dashboard
from ledger.states import State
from opsconsole.management.commands.demo_setup import HOOK_SECRET_ENV
from reconciliation import two_way_audit
from reconciliation.reconcile import reconcile_unknown_operations
from tests.subscribed import SECRET, SECRET_ENV, subscribe


@pytest.fixture
def a_full_day(settings, standin, django_user_model, monkeypatch):
    """The demo's set-up and a short day of its events against the stand-in failing in each of its
    ways, then a person's decisions of every kind: a database with a row of each kind."""
    monkeypatch.setenv(HOOK_SECRET_ENV, "whsec_" + base64.b64encode(b"a billing secret of 32 bytes....").decode())
    monkeypatch.setenv(SECRET_ENV, SECRET)
    monkeypatch.setenv("OPSCONSOLE_DEMO_FULFILMENT_TOKEN", "demo-fulfilment-token")
    settings.AXES_ENABLE_ACCESS_FAILURE_LOG = True  # off by default; its admin page is there all the same
    with time_machine.travel(timezone.now(), tick=False):
        return _the_day(standin, django_user_model)


def _the_day(standin, django_user_model) -> Workspace:
    call_command("demo_setup", url="http://console.test/", stdout=io.StringIO())
    workspace = Workspace.objects.get(slug="demo")
    viewer = django_user_model.objects.create_user(username="viewer", password="pw", is_staff=True)
    Membership.objects.create(user=viewer, workspace=workspace, role=Role.VIEWER)
    operator = django_user_model.objects.get(username="operator")
    approver = django_user_model.objects.get(username="approver")

    standin.fail_next(
        *[
            {"kind": "status", "status": 503, "retry_after": 1},
            {"kind": "delay", "seconds": 0},
            {"kind": "status", "status": 422, "error": "invalid_version", "detail": "version out of range"},
            {"kind": "delay", "seconds": 0},
            {"kind": "drop_after_commit"},
            {"kind": "status", "status": 400, "error": "owner_unknown", "detail": "no such owner in this tenant"},
            {"kind": "reset_before"},
            {"kind": "delay", "seconds": 0},
        ]
        * 4
    )
    for event in plan_day(90, tag="day", rng=random.Random(41)):
        submit.submit_event(workspace=workspace, raw=event, source=Delivery.Source.API, submitted_by="day")
    _work_through_due()

    refunds = list(Operation.objects.filter(state=State.PENDING_APPROVAL).order_by("pk"))
    approvals.approve_operation(refunds[0], user=approver, note="checked")
    approvals.reject_operation(refunds[1], user=approver, note="wrong customer")
    _work_through_due()
    unknown = Operation.objects.filter(state=State.UNKNOWN, action="send-notice").order_by("pk").first()
    resolutions.resolve_operation(unknown, user=operator, external_id="rec-x", reason="found it by hand")
    reconcile_unknown_operations()

    review = list(Operation.objects.filter(state=State.NEEDS_REVIEW).order_by("pk"))
    assignment.take_operation(review[0], user=operator)
    bulk, _ = bulk_actions.submit_bulk_action(
        user=operator, kind="replay", reason="the vendor is back", token="t-1", operation_ids=[review[1].pk]
    )
    bulk_actions.run_bulk_action(bulk.pk)
    cancellations.cancel_operation(review[2], user=operator, reason="sent by mistake")
    conflicts = list(Conflict.objects.order_by("pk"))
    conflict_decisions.dismiss_conflict(conflicts[0], user=operator, reason="a resend")
    refund = refunds[2].payload | {"amount_cents": refunds[2].payload["amount_cents"] + 1}
    raw = {"action": "issue-refund", "delivery_id": "changed-refund", "data": refund}  # held: a refund's conflict
    submit.submit_event(workspace=workspace, raw=raw, source=Delivery.Source.API, submitted_by="day")

    pause.set_paused(paused=True, actor="operator", reason="vendor maintenance", action="send-notice")
    pause.set_paused(paused=False, actor="operator", action="send-notice")
    pause.set_paused(paused=True, actor="operator", reason="quiet hour", workspace=workspace)
    policies.set_policy(workspace=workspace, action="update-status", actor="admin", ordering="latest_wins")

    standin.create("demo:stray-1:v1:file-ticket")  # at the destination, not in the ledger: a mismatch
    with time_machine.travel(timezone.now() + timedelta(hours=1)):
        two_way_audit.run_audit()
        dashboard.take_samples(catch_up=dashboard.HOURS + 1)

    subscribe(workspace, "https://flows.example.com/hooks")
    signer = Client()
    signer.post("/api/v1/hooks/billing", b"{}", content_type="application/json")  # unsigned: refused
    signer.post("/accounts/login/", {"username": "viewer", "password": "pw"})  # the throttle's rows
    signer.post("/accounts/login/", {"username": "approver", "password": "wrong"})
    _machinery_rows()
    late = {
        "action": "prepare-brief",
        "data": {"request_id": "late", "version": 1, "title": "After hours", "owner": "ops"},
    }
    submit.submit_event(workspace=workspace, raw=late, source=Delivery.Source.API, submitted_by="day")  # pending

    assert set(Operation.objects.values_list("state", flat=True)) == set(State.values)
    open_conflicts = Operation.objects.filter(conflicts__status=Conflict.Status.OPEN)
    assert {False, True} == {holds.is_held(operation) for operation in open_conflicts}
    return workspace


def _work_through_due() -> None:
    """One operation a claim, until none is due: each call to the stand-in takes its next fault in line,
    in the order claimed, so the day ends the same way each run (the clock stands still: a retry is
    not due again meanwhile)."""
    while process_due_operations(worker="w1", limit=1):
        pass


def _machinery_rows() -> None:
    """Rows no service of this process writes on a test database: a destination slot (leased behind a
    pooler only), the task queue's own (a queued task, a success it keeps none of, a failure), a group."""
    now = timezone.now()
    DestinationSlot.objects.create(name="standin", slot=0, holder="gate-1", held_until=now + timedelta(seconds=90))
    async_task("ledger.tasks.sweep")
    for success in (True, False):
        Task.objects.create(
            id=uuid.uuid4().hex,
            name=f"sweep-{success}",
            func="ledger.tasks.sweep",
            started=now,
            stopped=now,
            success=success,
            result="done" if success else "Traceback: ValueError",
            attempt_count=1,
        )
    Group.objects.create(name="auditors")
    # An archived month of the audit trail: last month's partition, made empty here, archived.
    last_month = now.replace(day=1) - timedelta(days=1)
    audit_partitions.ensure_range(last_month, last_month)
    with tempfile.TemporaryDirectory() as directory:
        audit_archive.archive_oldest(Path(directory))
    # The migrations' schedules are gone after a transactional test's flush: the sweep's again.
    ensure_schedule(Schedule, name="opsconsole-sweep", func="ledger.tasks.sweep", minutes=1)
