"""``manage.py erase`` redacts one data subject's values of a sensitive field everywhere in a
workspace (payloads, results, conflicts), keeping keys and fingerprints, in one audited change."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr

from ledger.actions import registry
from ledger.core import accounts
from ledger.core.privacy import REDACTED
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, Conflict, OnConflict, Operation
from ledger.outcomes import Success
from ledger.people.approvals import approve_operation, reject_operation

REFUND = {"request_id": "R-1", "version": 1, "customer_id": "C-9", "amount_cents": 4500, "currency": "EUR"}


def refund(workspace, **data):
    return submit_event(workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND | data})


def erase(*args, username="boss", reason="erasure request ER-17") -> str:
    out = StringIO()
    call_command("erase", "--workspace", "demo", *args, "--as", username, "--reason", reason, stdout=out)
    return out.getvalue().strip()


@pytest.fixture
def boss(person):
    return person("boss", "admin")


@pytest.fixture
def subject(workspace, boss, approver, standin, monkeypatch):
    """C-9's refunds: R-1 (succeeded; a resend for C-8 conflicted with it), and C-8's refund R-2
    (rejected), which a resend for C-9 conflicted with. C-7's R-3 is someone else's. The conflicts
    hold nothing here (issue-refund holds by default): this story is about what was kept."""
    monkeypatch.setattr(registry["issue-refund"], "on_conflict", OnConflict.FIRST_WINS)
    first = refund(workspace).operation
    assert refund(workspace, customer_id="C-8").outcome == "conflict"
    second = refund(workspace, request_id="R-2", customer_id="C-8").operation
    assert refund(workspace, request_id="R-2", customer_id="C-9").outcome == "conflict"
    other = refund(workspace, request_id="R-3", customer_id="C-7").operation
    approve_operation(first, user=approver)
    process_due_operations()
    reject_operation(second, user=approver, note="duplicate")
    reject_operation(other, user=approver, note="duplicate")
    first.refresh_from_db()
    assert first.state == "succeeded"
    return first, second, other


def test_it_redacts_the_value_everywhere_and_keeps_keys_and_fingerprints(subject):
    first, second, other = subject
    before = {operation.pk: (operation.key, operation.fingerprint) for operation in Operation.objects.all()}

    said = erase("--field", "customer_id", "--value", "C-9")

    assert said == (
        "Erased customer_id in workspace demo: 1 operation payloads, 0 results, 1 conflict payloads, "
        "2 conflict differences."
    )
    assert {operation.pk: (operation.key, operation.fingerprint) for operation in Operation.objects.all()} == before
    first.refresh_from_db()
    assert first.payload == REFUND | {"customer_id": REDACTED}
    assert Operation.objects.get(pk=second.pk).payload["customer_id"] == "C-8"
    assert Operation.objects.get(pk=other.pk).payload["customer_id"] == "C-7"
    on_first, on_second = Conflict.objects.get(operation=first), Conflict.objects.get(operation=second)
    assert on_first.differences == [{"field": "customer_id", "recorded": REDACTED, "incoming": "C-8"}]
    assert on_first.incoming_payload["customer_id"] == "C-8"
    assert on_second.differences == [{"field": "customer_id", "recorded": "C-8", "incoming": REDACTED}]
    assert on_second.incoming_payload == REFUND | {"request_id": "R-2", "customer_id": REDACTED}


def test_it_audits_the_field_and_counts_never_the_value(subject):
    erase("--field", "customer_id", "--value", "C-9")

    event = AuditEvent.objects.get(kind="erased")
    assert (event.actor, event.workspace.slug, event.operation_id) == ("boss", "demo", None)
    assert event.message == (
        "erased one data subject's customer_id: 1 operation payloads, 0 results, 1 conflict "
        "payloads, 2 conflict differences; reason: erasure request ER-17"
    )
    assert not AuditEvent.objects.filter(message__contains="C-9").exists()
    call_command("verify_audit", "--no-heads", stdout=StringIO())  # the chain still holds


def test_a_redelivery_of_an_erased_event_is_still_a_duplicate(subject, workspace):
    erase("--field", "customer_id", "--value", "C-9")

    again = refund(workspace)

    assert again.outcome == "duplicate"
    assert again.operation.payload["customer_id"] == REDACTED


def test_it_shows_an_erased_value_as_erased_to_everyone(subject, client, person):
    first, _, _ = subject
    erase("--field", "customer_id", "--value", "C-9")
    client.force_login(person("viewer", "viewer"))

    page = client.get(f"/console/operations/{first.pk}/").content.decode()

    assert f"<dt>Customer</dt><dd>{REDACTED}</dd>" in page
    assert "<dt>Amount</dt><dd>••••</dd>" in page


def test_it_erases_a_number_given_as_digits(subject):
    said = erase("--field", "amount_cents", "--value", "4500")

    assert said.startswith(
        "Erased amount_cents in workspace demo: 3 operation payloads, 0 results, 2 conflict payloads"
    )
    assert set(Operation.objects.values_list("payload__amount_cents", flat=True)) == {REDACTED}
    assert Operation.objects.get(key="demo:R-1:v1:issue-refund").payload["customer_id"] == "C-9"


def test_a_dry_run_counts_and_changes_nothing(subject):
    said = erase("--field", "customer_id", "--value", "C-9", "--dry-run")

    assert said.startswith("Would erase customer_id in workspace demo: 1 operation payloads")
    assert Operation.objects.filter(payload__customer_id="C-9").count() == 1
    assert not AuditEvent.objects.filter(kind="erased").exists()


def test_it_leaves_other_workspaces_alone(subject, person):
    elsewhere, _ = accounts.create_workspace(slug="acme", approved_owners=["ops"], actor="test")
    theirs = refund(elsewhere).operation

    erase("--field", "customer_id", "--value", "C-9")

    theirs.refresh_from_db()
    assert theirs.payload["customer_id"] == "C-9"


def test_it_refuses_while_an_operation_holding_the_value_has_not_finished(subject, workspace):
    waiting = refund(workspace, request_id="R-4").operation
    assert waiting.state == "pending_approval"

    with pytest.raises(
        CommandError,
        match=(
            r"1 operations holding the value have not finished "
            r"\(demo:R-4:v1:issue-refund\): they would run or be replayed"
        ),
    ):
        erase("--field", "customer_id", "--value", "C-9")

    assert Operation.objects.filter(payload__customer_id="C-9").count() == 2
    assert not AuditEvent.objects.filter(kind="erased").exists()


def test_it_refuses_an_open_conflict_whose_operation_may_still_take_it(workspace, boss):
    """Applying the conflict would make its redacted payload the operation's, to be sent."""
    refund(workspace, customer_id="C-8")
    refund(workspace)  # C-9 conflicts with the refund that awaits approval

    with pytest.raises(CommandError, match="1 operations holding the value have not finished"):
        erase("--field", "customer_id", "--value", "C-9")


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (
            ["--field", "currency", "--value", "EUR"],
            {},
            "No action declares 'currency' sensitive; sensitive fields: amount_cents, customer_id, email.",
        ),
        (
            ["--field", "customer_id", "--value", "C-9"],
            {"username": "approver"},
            "approver may not erase personal data in workspace demo.",
        ),
        (
            ["--field", "customer_id", "--value", "C-9"],
            {"reason": "customer C-9 asked"},
            "The reason quotes the value: it would be kept in the audit trail. Give a reference.",
        ),
        (
            ["--field", "customer_id", "--value", "C-9"],
            {"reason": " "},
            "Say why (a request reference, not the value): the reason is kept in the audit trail.",
        ),
        (["--field", "customer_id", "--value", ""], {}, "Give the value to erase."),
    ],
)
def test_it_refuses_what_it_cannot_do_and_says_why(subject, args, kwargs, message):
    with pytest.raises(CommandError) as refused:
        erase(*args, **kwargs)

    assert str(refused.value) == message
    assert Operation.objects.filter(payload__customer_id="C-9").exists()


def test_it_refuses_an_unknown_workspace(boss):
    with pytest.raises(CommandError, match="No workspace 'nowhere'."):
        call_command(
            "erase",
            "--workspace",
            "nowhere",
            "--field",
            "customer_id",
            "--value",
            "C-9",
            "--as",
            "boss",
            "--reason",
            "ER-1",
            stdout=StringIO(),
        )


class AccountData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: StrictStr
    version: StrictInt
    customer_id: StrictStr


def test_it_erases_a_value_the_destination_answered_in_the_result(workspace, boss, scripted_action):
    action = scripted_action(
        schema=AccountData,
        fingerprint_fields=("request_id", "version", "customer_id"),
        sensitive_fields=("customer_id",),
    )
    action.destination.answer(Success(result={"account": "A-1", "customer_id": "C-9"}))
    submit_event(
        workspace=workspace,
        source="api",
        raw={"action": action.name, "data": {"request_id": "R-1", "version": 1, "customer_id": "C-9"}},
    )
    process_due_operations()

    said = erase("--field", "customer_id", "--value", "C-9")

    assert said.startswith("Erased customer_id in workspace demo: 1 operation payloads, 1 results,")
    assert Operation.objects.get().result == {"account": "A-1", "customer_id": REDACTED}


def test_it_erases_an_address_that_is_part_of_the_identity(workspace, boss, standin):
    welcome = {"action": "send-welcome", "data": {"email": "ann@example.com", "version": 1, "language": "en"}}
    operation = submit_event(workspace=workspace, source="api", raw=welcome).operation
    process_due_operations()

    erase("--field", "email", "--value", "ann@example.com")

    after = Operation.objects.get()
    assert (after.key, after.fingerprint, after.payload["email"]) == (operation.key, operation.fingerprint, REDACTED)
    assert submit_event(workspace=workspace, source="api", raw=welcome).outcome == "duplicate"


def test_a_reason_may_hold_the_values_digits_within_another_reference(subject):
    said = erase("--field", "amount_cents", "--value", "4500", reason="request ER-145001")

    assert said.startswith("Erased amount_cents")
