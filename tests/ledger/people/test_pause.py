"""Pause switches at three scopes hold exactly the matching operations; resuming drains them."""

from io import StringIO
from urllib.parse import quote

import pytest
from django.core.management import CommandError, call_command
from django_q.models import OrmQ

from ledger.core import accounts
from ledger.engine.claiming import claim_due_operations
from ledger.engine.processing import process_due_operations
from ledger.models import AuditEvent, Control, Operation, Workspace
from ledger.people import pause
from ledger.people.pause import set_paused
from tests.ledger.conftest import submit, submit_brief


@pytest.fixture
def note_action(scripted_action):
    return scripted_action(name="test-note")


@pytest.fixture
def operations(workspace, note_action):
    """One operation per (workspace, action): demo and other, prepare-brief and test-note."""
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    return {
        ("demo", "prepare-brief"): submit_brief(workspace),
        ("demo", "test-note"): submit(workspace, "test-note"),
        ("other", "prepare-brief"): submit_brief(other),
        ("other", "test-note"): submit(other, "test-note"),
    }


def scope_kwargs(workspace_slug=None, action=""):
    workspace = Workspace.objects.get(slug=workspace_slug) if workspace_slug else None
    return {"workspace": workspace, "action": action}


def states(operations):
    by_pk = dict(Operation.objects.values_list("pk", "state"))
    return {name: by_pk[operation.pk] for name, operation in operations.items()}


SCOPES = {
    "global": (
        (None, ""),
        {("demo", "prepare-brief"), ("demo", "test-note"), ("other", "prepare-brief"), ("other", "test-note")},
    ),
    "workspace": (("demo", ""), {("demo", "prepare-brief"), ("demo", "test-note")}),
    "action": ((None, "prepare-brief"), {("demo", "prepare-brief"), ("other", "prepare-brief")}),
    "workspace+action": (("demo", "prepare-brief"), {("demo", "prepare-brief")}),
}


@pytest.mark.parametrize("scope", SCOPES, ids=list(SCOPES))
def test_it_holds_exactly_the_operations_a_switch_matches_and_drains_them_on_resume(
    scope, operations, api, sync_queue, django_capture_on_commit_callbacks
):
    """Held operations keep their state and stay visible; the others run; resuming runs the rest."""
    (slug, action), held = SCOPES[scope]
    set_paused(paused=True, actor="alice", reason="incident 12", **scope_kwargs(slug, action))

    assert process_due_operations(limit=100, worker="w") == 4 - len(held)

    assert states(operations) == {name: "pending" if name in held else "succeeded" for name in operations}
    held_brief = operations.get(("demo", "prepare-brief"))
    response = api.get(f"/api/v1/operations/{quote(held_brief.key, safe='')}")
    assert response.status_code == 200
    assert response.json()["state"] == ("pending" if ("demo", "prepare-brief") in held else "succeeded")

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        set_paused(paused=False, actor="bob", **scope_kwargs(slug, action))

    assert len(callbacks) == 1
    assert set(states(operations).values()) == {"succeeded"}


def test_it_keeps_a_held_retry_as_it_was(operations, note_action, time_machine):
    """Pause is not a state: a due retry in a paused scope stays retrying with its time."""
    retrying = operations[("other", "test-note")]
    time_machine.move_to(retrying.created_at, tick=False)
    Operation.objects.filter(pk=retrying.pk).update(state="retrying", attempts=1, next_attempt_at=retrying.created_at)
    set_paused(paused=True, actor="alice", reason="destination down", action="test-note")

    claimed = claim_due_operations(limit=100, worker="w")

    assert {op.pk for op in claimed} == {
        operations[("demo", "prepare-brief")].pk,
        operations[("other", "prepare-brief")].pk,
    }
    retrying.refresh_from_db()
    assert (retrying.state, retrying.attempts, retrying.next_attempt_at) == ("retrying", 1, retrying.created_at)


def test_it_keeps_holding_while_another_switch_is_still_pulled(
    operations, sync_queue, django_capture_on_commit_callbacks
):
    """Releasing the workspace switch does not release the global one."""
    demo = Workspace.objects.get(slug="demo")
    set_paused(paused=True, actor="alice", reason="all stop")
    set_paused(paused=True, actor="alice", reason="demo only", workspace=demo)

    with django_capture_on_commit_callbacks(execute=True):
        set_paused(paused=False, actor="bob", workspace=demo)
    assert set(states(operations).values()) == {"pending"}

    with django_capture_on_commit_callbacks(execute=True):
        set_paused(paused=False, actor="bob")
    assert set(states(operations).values()) == {"succeeded"}


def test_it_nudges_the_workers_only_once_the_resume_commits(operations, django_capture_on_commit_callbacks):
    """No task can run before the released switch is visible to the workers."""
    set_paused(paused=True, actor="alice", reason="deploy")
    OrmQ.objects.all().delete()

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        set_paused(paused=False, actor="bob")
    assert OrmQ.objects.count() == 0

    for callback in callbacks:
        callback()
    assert OrmQ.objects.count() == 1


def test_it_audits_pause_and_resume_with_actor_and_reason(workspace):
    """Each switch change is one audit event naming who, which scope and why."""
    set_paused(paused=True, actor="alice", reason="incident 12", workspace=workspace, action="prepare-brief")
    set_paused(paused=False, actor="bob", workspace=workspace, action="prepare-brief")

    events = AuditEvent.objects.filter(kind__in=["paused", "resumed"])
    assert list(events.values_list("kind", "actor", "workspace", "message")) == [
        ("paused", "alice", workspace.pk, "workspace demo, action prepare-brief: incident 12"),
        ("resumed", "bob", workspace.pk, "workspace demo, action prepare-brief"),
    ]
    control = Control.objects.get()
    assert (control.paused, control.changed_by) == (False, "bob")


def test_it_pauses_and_resumes_from_the_command_line(operations):
    """No scope option means the global switch; --workspace and --action narrow it."""
    out = StringIO()
    call_command("pause", reason="deploy", stdout=out)
    call_command("pause", "--reason", "crm down", "--workspace", "demo", "--action", "test-note", stdout=out)
    call_command("resume", stdout=out)

    assert out.getvalue().splitlines() == [
        "Paused global: deploy",
        "Paused workspace demo, action test-note: crm down",
        "Resumed global.",
    ]
    assert process_due_operations(limit=100, worker="w") == 3
    assert states(operations)[("demo", "test-note")] == "pending"
    assert set(AuditEvent.objects.filter(kind__in=["paused", "resumed"]).values_list("actor", flat=True)) == {"cli"}


@pytest.mark.parametrize(
    ("command", "options", "message"),
    [
        ("pause", ["--reason", "x", "--workspace", "nope"], "No workspace 'nope'."),
        ("resume", ["--workspace", "nope"], "No workspace 'nope'."),
        ("pause", ["--reason", "x", "--action", "send-fax"], "Unknown action 'send-fax'; known: "),
        ("resume", ["--action", "send-fax"], "Unknown action 'send-fax'; known: "),
        ("pause", [], "the following arguments are required: --reason"),
    ],
)
def test_it_refuses_an_unknown_scope_on_the_command_line(workspace, command, options, message):
    """A typo must not pull (or release) a switch nobody meant."""
    with pytest.raises(CommandError, match=message):
        call_command(command, *options)

    assert Control.objects.count() == 0
    assert not AuditEvent.objects.filter(kind__in=["paused", "resumed"]).exists()


def test_it_refuses_to_resume_a_scope_that_is_not_paused(workspace):
    """A resume of a scope nobody paused is an error, not a silent success, and writes nothing."""
    pause.set_paused(paused=True, reason="outage", workspace=workspace, actor="alice")
    with pytest.raises(CommandError, match="Nothing to resume: action prepare-brief is not paused."):
        call_command("resume", "--action", "prepare-brief", stdout=StringIO())
    assert not AuditEvent.objects.filter(kind="resumed").exists()
    assert Control.objects.filter(paused=True).count() == 1
