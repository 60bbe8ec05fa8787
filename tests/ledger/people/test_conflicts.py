"""A conflict is decided by a person: dismissed, or applied while its operation has not run."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError

from ledger.engine.processing import process_due_operations
from ledger.keys import fingerprint
from ledger.models import AuditEvent, Conflict, Operation, ReviewDraft
from ledger.people import conflict_decisions, review
from tests.conftest import event


@pytest.fixture
def conflict(api):
    api.post("/api/v1/events", event("d-1"))
    response = api.post("/api/v1/events", event("d-2", title="Review renewal options, EMEA only"))
    return Conflict.objects.get(pk=response.json()["conflict_id"])


def test_it_applies_the_incoming_payload_before_the_operation_runs(conflict, alice):
    conflict_decisions.apply_conflict(conflict, user=alice, reason="sender corrected the title")

    operation = Operation.objects.get()
    assert operation.payload["title"] == "Review renewal options, EMEA only"
    assert operation.fingerprint == fingerprint(operation.payload, ["request_id", "version", "title", "owner"])
    conflict.refresh_from_db()
    assert (conflict.status, conflict.decided_by) == ("applied", "alice")
    assert AuditEvent.objects.get(kind="conflict_applied").message == (
        f"conflict {conflict.pk} (title): sender corrected the title"
    )

    process_due_operations()
    assert ReviewDraft.objects.get().title == "Review renewal options, EMEA only"


def test_it_treats_a_resend_of_the_applied_payload_as_a_duplicate(api, conflict, alice):
    conflict_decisions.apply_conflict(conflict, user=alice, reason="corrected")

    response = api.post("/api/v1/events", event("d-3", title="Review renewal options, EMEA only"))

    assert response.json()["status"] == "duplicate"


def test_it_refuses_to_apply_once_the_operation_has_run(conflict, alice):
    process_due_operations()

    with pytest.raises(review.ReviewError, match="a conflict can only be applied before the operation runs"):
        conflict_decisions.apply_conflict(conflict, user=alice, reason="too late")

    conflict.refresh_from_db()
    assert conflict.status == "open"
    assert Operation.objects.get().payload["title"] == "Review renewal options"
    assert ReviewDraft.objects.get().title == "Review renewal options"
    assert not AuditEvent.objects.filter(kind="conflict_applied").exists()


def test_it_dismisses_a_conflict_and_keeps_the_recorded_payload(conflict, bob):
    conflict_decisions.dismiss_conflict(conflict, user=bob, reason="stale resend")

    conflict.refresh_from_db()
    assert (conflict.status, conflict.decided_by) == ("dismissed", "bob")
    assert Operation.objects.get().payload["title"] == "Review renewal options"
    assert AuditEvent.objects.get(kind="conflict_dismissed").actor == "bob"


@pytest.mark.parametrize("decide", [conflict_decisions.apply_conflict, conflict_decisions.dismiss_conflict])
def test_it_decides_a_conflict_only_once(conflict, decide, alice, bob):
    stale_copy = Conflict.objects.get(pk=conflict.pk)
    conflict_decisions.dismiss_conflict(conflict, user=bob, reason="first")

    with pytest.raises(review.ReviewError, match=f"Conflict {conflict.pk} is already dismissed."):
        decide(stale_copy, user=alice, reason="second")

    assert Operation.objects.get().payload["title"] == "Review renewal options"
    assert AuditEvent.objects.filter(kind__startswith="conflict_").exclude(kind="conflict_detected").count() == 1


def test_it_refuses_a_decided_conflict_without_a_decider_in_the_database(conflict):
    with pytest.raises(IntegrityError):
        Conflict.objects.filter(pk=conflict.pk).update(status="dismissed")


def test_it_lists_and_decides_conflicts_from_the_command_line(conflict, alice):
    out = StringIO()
    call_command("conflict", "list", stdout=out)
    call_command("conflict", "apply", str(conflict.pk), "--as", "alice", "--reason", "corrected", stdout=out)
    call_command("conflict", "list", "--workspace", "demo", stdout=out)

    assert out.getvalue().splitlines() == [
        f"{conflict.pk}  demo:R-42:v3:prepare-brief  (pending)  differs in: title",
        f"Conflict {conflict.pk} on demo:R-42:v3:prepare-brief: applied.",
    ]
    assert AuditEvent.objects.get(kind="conflict_applied").actor == "alice"
    assert list(Operation.objects.get().contributions.values_list("user__username", "kind")) == [("alice", "changed")]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["dismiss", "999", "--as", "alice", "--reason", "x"], "No conflict 999."),
        (["dismiss", "{conflict}", "--as", "nobody", "--reason", "x"], "No active user 'nobody'."),
        (["dismiss", "{conflict}", "--as", "clerk", "--reason", "x"], "clerk may not replay, resolve, cancel"),
    ],
)
def test_it_explains_what_the_command_cannot_do(conflict, args, message, alice, person):
    person("clerk", "viewer")
    args = [arg.format(conflict=conflict.pk) for arg in args]
    with pytest.raises(CommandError, match=message):
        call_command("conflict", *args, stdout=StringIO())


def test_it_explains_a_refused_apply_on_the_command_line(conflict, alice):
    process_due_operations()
    with pytest.raises(CommandError, match="has already run or changed"):
        call_command("conflict", "apply", str(conflict.pk), "--as", "alice", "--reason", "late", stdout=StringIO())
