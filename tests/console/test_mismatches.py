"""The console's mismatches page and its decisions: acknowledge, adopt the destination's record,
replay where the record is missing (through the safe replay path), each for the people who may
review in the mismatch's workspace only, each audited."""

import pytest
from django.utils import timezone

from ledger.core import accounts
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, Membership, Operation
from reconciliation.models import Mismatch, ReconciliationRun
from tests.conftest import external_event


@pytest.fixture
def run(db):
    now = timezone.now()
    return ReconciliationRun.objects.create(started_at=now, since=now, until=now, status="succeeded")


def mismatch(
    run, workspace, kind, *, operation=None, reference="demo:R-9:v1:send-notice", record_id="rec-9", evidence=None
):
    return Mismatch.objects.create(
        run=run,
        workspace=workspace,
        operation=operation,
        action="send-notice",
        kind=kind,
        reference=operation.key if operation else reference,
        record_id=record_id,
        evidence=evidence or {"record_id": record_id},
    )


def operation_in(workspace, state, request_id="R-5"):
    operation = submit_event(
        workspace=workspace,
        source="api",
        raw=external_event("send-notice", delivery_id=f"d-{request_id}", request_id=request_id),
    ).operation
    Operation.objects.filter(pk=operation.pk).update(state=state)
    operation.refresh_from_db()
    return operation


def test_it_lists_open_mismatches_with_their_evidence_and_actions(client, login, run, workspace):
    login("operator")
    differs = mismatch(run, workspace, "content_differs", evidence={"record_id": "rec-9", "fields": ["summary"]})
    mismatch(run, workspace, "unknown_to_ledger", record_id="rec-10")
    closed = mismatch(run, workspace, "unknown_to_ledger", record_id="rec-11")
    Mismatch.objects.filter(pk=closed.pk).update(status="acknowledged", decided_by="x", decided_at=timezone.now())

    page = client.get("/console/mismatches/")

    assert page.status_code == 200
    html = page.content.decode()
    assert f'id="mismatch-{differs.pk}"' in html
    assert "summary" in html
    assert "rec-10" in html
    assert "rec-11" not in html
    assert "Acknowledge" in html
    assert "Recent audits" not in html  # runs count every workspace: superusers only


def test_the_queue_links_to_the_mismatches(client, login):
    login("viewer")
    assert 'href="/console/mismatches/"' in client.get("/console/").content.decode()


def test_a_viewer_sees_but_may_not_decide(client, login, run, workspace):
    login("viewer")
    m = mismatch(run, workspace, "unknown_to_ledger")

    assert "You may look, not decide." in client.get("/console/mismatches/").content.decode()
    response = client.post(f"/console/mismatches/{m.pk}/acknowledge/", {"reason": "seen"})

    assert response.status_code == 403
    m.refresh_from_db()
    assert m.status == "open"


def test_another_workspaces_mismatch_is_not_found(client, login, run, django_user_model):
    login("operator")
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    m = mismatch(run, other, "unknown_to_ledger", reference="other:R-9:v1:send-notice")

    assert "other:R-9" not in client.get("/console/mismatches/").content.decode()
    for verb in ("acknowledge", "adopt", "replay"):
        assert client.post(f"/console/mismatches/{m.pk}/{verb}/", {"reason": "x"}).status_code == 404


def test_actions_are_post_only_and_need_a_login(client, login, run, workspace):
    m = mismatch(run, workspace, "unknown_to_ledger")
    assert client.post(f"/console/mismatches/{m.pk}/acknowledge/", {"reason": "x"}).status_code == 302  # login
    login("operator")
    assert client.get(f"/console/mismatches/{m.pk}/acknowledge/").status_code == 405


def test_acknowledging_closes_it_with_the_reason_and_audits_it(client, login, run, workspace):
    login("operator")
    m = mismatch(run, workspace, "unknown_to_ledger")

    response = client.post(f"/console/mismatches/{m.pk}/acknowledge/", {"reason": "a test record"}, follow=True)

    assert "Acknowledged mismatch" in response.content.decode()
    m.refresh_from_db()
    assert (m.status, m.decided_by, m.note) == ("acknowledged", "operator", "a test record")
    event = AuditEvent.objects.get(kind="mismatch_acknowledged")
    assert (event.actor, event.workspace_id) == ("operator", workspace.pk)
    assert "a test record" in event.message

    again = client.post(f"/console/mismatches/{m.pk}/acknowledge/", {"reason": "again"}, follow=True)
    assert f"Mismatch {m.pk} is already acknowledged." in again.content.decode()


def test_a_decision_needs_a_reason(client, login, run, workspace):
    login("operator")
    m = mismatch(run, workspace, "unknown_to_ledger")

    response = client.post(f"/console/mismatches/{m.pk}/acknowledge/", {"reason": ""}, follow=True)

    assert "Reason is required; nothing was changed." in response.content.decode()
    m.refresh_from_db()
    assert m.status == "open"


def test_adopting_resolves_the_operation_with_the_records_id(client, login, run, workspace):
    login("operator")
    operation = operation_in(workspace, "needs_review")
    m = mismatch(run, workspace, "unknown_to_ledger", operation=operation, record_id="rec-42")

    response = client.post(f"/console/mismatches/{m.pk}/adopt/", {"reason": "it is ours"}, follow=True)

    assert "Adopted record rec-42" in response.content.decode()
    operation.refresh_from_db()
    m.refresh_from_db()
    assert (operation.state, operation.external_id, m.status) == ("succeeded", "rec-42", "adopted")
    resolved = AuditEvent.objects.get(kind="resolved", operation=operation)
    assert f"reconciliation mismatch {m.pk}: it is ours" in resolved.message


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("no operation", "No operation has the key"),
        ("succeeded", "already succeeded"),
        ("pending", "Only an unknown operation or one that needs review can be resolved"),
        ("wrong kind", "Only a record unknown to the ledger can be adopted"),
    ],
)
def test_adopting_explains_when_it_cannot(client, login, run, workspace, case, expected):
    login("operator")
    if case == "no operation":
        m = mismatch(run, workspace, "unknown_to_ledger")
    elif case == "wrong kind":
        m = mismatch(run, workspace, "content_differs")
    else:
        m = mismatch(run, workspace, "unknown_to_ledger", operation=operation_in(workspace, case))

    response = client.post(f"/console/mismatches/{m.pk}/adopt/", {"reason": "ours"}, follow=True)

    assert expected in response.content.decode()
    m.refresh_from_db()
    assert m.status == "open"  # a refused adoption decides nothing


def test_replaying_a_missing_record_sends_it_again_after_asking_the_destination(
    client, login, run, workspace, standin, time_machine
):
    login("operator")
    operation = submit_event(workspace=workspace, raw=external_event("file-ticket"), source="api").operation
    process_due_operations(worker="w1")
    operation.refresh_from_db()
    first_record = operation.external_id
    standin.http.post("/_delete", json={"id": first_record}).raise_for_status()
    time_machine.move_to(timezone.now() + timezone.timedelta(minutes=5))
    m = mismatch(run, workspace, "missing_at_destination", operation=operation, record_id="")

    response = client.post(f"/console/mismatches/{m.pk}/replay/", {"reason": "record lost"}, follow=True)

    assert f"Replayed {operation.key}" in response.content.decode()
    assert standin.requests("GET /records") == 1  # asked first
    operation.refresh_from_db()
    m.refresh_from_db()
    assert (operation.state, m.status) == ("pending", "replayed")
    kinds = list(
        AuditEvent.objects.filter(operation=operation).values_list("kind", "from_state", "to_state").order_by("id")
    )[-2:]
    assert kinds == [("reopened_missing", "succeeded", "needs_review"), ("replayed", "needs_review", "pending")]
    process_due_operations(worker="w2")
    operation.refresh_from_db()
    assert operation.state == "succeeded"
    assert operation.external_id != first_record


def test_replay_finds_the_record_after_all_and_sends_nothing(client, login, run, workspace, standin, time_machine):
    login("operator")
    operation = submit_event(workspace=workspace, raw=external_event("file-ticket"), source="api").operation
    process_due_operations(worker="w1")
    operation.refresh_from_db()
    time_machine.move_to(timezone.now() + timezone.timedelta(minutes=5))
    m = mismatch(run, workspace, "missing_at_destination", operation=operation, record_id="")

    response = client.post(f"/console/mismatches/{m.pk}/replay/", {"reason": "check"}, follow=True)

    assert "has the record after all" in response.content.decode()
    operation.refresh_from_db()
    assert operation.state == "succeeded"
    assert standin.requests() == 1  # the original create only


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("purged", "is gone (removed by retention)"),
        ("moved", "no longer succeeded"),
        ("wrong kind", "Only an operation whose record is missing can be replayed"),
    ],
)
def test_replaying_explains_when_it_cannot(client, login, run, workspace, case, expected):
    login("operator")
    if case == "purged":
        m = mismatch(run, workspace, "missing_at_destination")
    elif case == "wrong kind":
        m = mismatch(run, workspace, "unknown_to_ledger", operation=operation_in(workspace, "succeeded"))
    else:
        m = mismatch(run, workspace, "missing_at_destination", operation=operation_in(workspace, "needs_review"))

    response = client.post(f"/console/mismatches/{m.pk}/replay/", {"reason": "x"}, follow=True)

    assert expected in response.content.decode()
    m.refresh_from_db()
    assert m.status == "open"


def test_a_superuser_sees_the_recent_runs(client, run, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))

    html = client.get("/console/mismatches/").content.decode()

    assert "Recent audits" in html
    assert "succeeded" in html


def test_an_admin_in_the_workspace_may_decide(client, login, run, workspace):
    user = login("admin")
    assert Membership.objects.get(user=user).role == "admin"
    m = mismatch(run, workspace, "unknown_to_ledger")
    client.post(f"/console/mismatches/{m.pk}/acknowledge/", {"reason": "ok"})
    m.refresh_from_db()
    assert m.status == "acknowledged"
