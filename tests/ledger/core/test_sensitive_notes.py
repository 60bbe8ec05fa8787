"""Notes that cannot leak: a reason or note that quotes a sensitive value of what it concerns is
refused by the service every entry point calls (``sensitive_notes.refuse_sensitive_note``), naming the
field it matched and never the value, and nothing is written; a note without the value is kept."""

import pytest
from django.core.management import CommandError, call_command

from ledger.core import erasure, privacy, sensitive_notes
from ledger.core.sensitive_notes import SensitiveNote
from ledger.intake.submit import submit_event
from ledger.models import Approval, AuditEvent, BulkAction, BulkItem, Conflict, Operation
from ledger.people import approvals, bulk_actions, cancellations, conflict_decisions, replays, resolutions, review
from ledger.people.review import ReviewError
from ledger.states import State

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 123456, "currency": "EUR"}
REFUSED = "The reason contains the customer_id of this operation; sensitive values are masked for viewers and "
REFUSED += "operators: describe it without the value. Nothing was changed."


def refund(workspace, **data):
    raw = {"action": "issue-refund", "data": REFUND | data}
    return submit_event(workspace=workspace, source="api", raw=raw).operation


def welcome(workspace, email="Ann.Lee@Example.com"):
    raw = {"action": "send-welcome", "data": {"email": email, "version": 1, "language": "en"}}
    return submit_event(workspace=workspace, source="api", raw=raw).operation


def refused_field(text, *concerns, label="reason"):
    """The field the note was refused for, or None when it is accepted."""
    try:
        sensitive_notes.refuse_sensitive_note(text, concerns, label=label)
    except SensitiveNote as exc:
        return exc.field
    return None


def written():
    """Everything a refused note must leave as it was."""
    return (
        list(Operation.objects.order_by("pk").values_list("pk", "state", "payload")),
        list(Conflict.objects.order_by("pk").values_list("pk", "status")),
        AuditEvent.objects.count(),
        Approval.objects.count(),
        BulkAction.objects.count(),
    )


def needs_review(operation):
    Operation.objects.filter(pk=operation.pk).update(state=State.NEEDS_REVIEW)  # test setup only
    operation.refresh_from_db()
    return operation


# --- matching -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("Customer C-1001 called", "customer_id"),
        ("customer c-1001 called", "customer_id"),  # case aside
        ("refund of 123456 cents", "amount_cents"),
        ("refund of 123,456 cents", "amount_cents"),  # a number with thousands separators
        ("refunded 1,234.56 EUR by hand", "amount_cents"),  # a money amount in its units
        ("refunded 1234.56 by hand", "amount_cents"),
        ("refunded 1.234,56 € by hand", "amount_cents"),
        ("refunded 1234,56 by hand", "amount_cents"),
        ("(C-1001)", "customer_id"),
        ("ＣＵＳＴＯＭＥＲ Ｃ-１００１", "customer_id"),  # full-width letters: NFKC
        ("customer C-10010 is another", None),  # a whole value, not a part of another word
        ("ticket XC-1001", None),
        ("the destination answered 400", None),
        ("checked R-7 by hand", None),  # the request id is not sensitive
        ("paid in EUR", None),
        ("", None),
    ],
)
def test_it_finds_a_sensitive_value_as_a_person_writes_it(workspace, text, field):
    assert refused_field(text, refund(workspace)) == field


def test_it_finds_an_address_in_any_case_and_with_any_spacing(workspace):
    operation = welcome(workspace)

    assert refused_field("welcome  sent to ANN.LEE@example.COM twice", operation) == "email"
    assert refused_field("welcome sent to the new subscriber twice", operation) is None


def test_it_normalises_whitespace_inside_a_value(workspace, scripted_action):
    from tests.console.conftest import NotedData

    action = scripted_action(
        schema=NotedData, fingerprint_fields=("request_id", "version", "note", "secret"), sensitive_fields=("secret",)
    )
    raw = {"action": action.name, "data": {"request_id": "R-1", "version": 1, "note": "n", "secret": "Ann  Lee"}}
    operation = submit_event(workspace=workspace, source="api", raw=raw).operation

    assert refused_field("called ann\n lee back", operation) == "secret"


def test_it_leaves_values_too_short_to_tell_apart(workspace):
    # "45" would refuse every note with a 45 in it; documented as not caught.
    assert refused_field("refund of 45 and 00", refund(workspace, customer_id="C1", amount_cents=45)) is None


def test_it_finds_a_sensitive_value_of_the_result_and_of_a_conflicts_payload(workspace):
    operation = refund(workspace)
    Operation.objects.filter(pk=operation.pk).update(result={"customer_id": "C-2002", "refund": "rf_1"})
    operation.refresh_from_db()
    conflict = submit_event(
        workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND | {"customer_id": "C-3003"}}
    ).conflict

    assert refused_field("was C-2002", operation) == "customer_id"
    assert refused_field("refund rf_1", operation) is None  # not a sensitive field
    assert refused_field("should be C-3003", operation, conflict) == "customer_id"


def test_every_value_of_an_operation_whose_action_is_gone_is_sensitive(workspace):
    operation = refund(workspace)
    Operation.objects.filter(pk=operation.pk).update(action="gone-action")
    operation.refresh_from_db()

    assert refused_field("request R-7", operation) == "request_id"


def test_an_erased_value_is_no_secret(workspace):
    operation = refund(workspace, customer_id=privacy.REDACTED)

    assert refused_field(f"customer {privacy.REDACTED}", operation) is None


def test_the_message_names_the_field_and_never_the_value(workspace):
    with pytest.raises(SensitiveNote) as refused:
        sensitive_notes.refuse_sensitive_note("Customer C-1001 …", [refund(workspace)], label="reason")

    assert str(refused.value) == REFUSED
    assert "1001" not in str(refused.value)


def test_the_message_names_the_operation_when_the_note_concerns_several(workspace):
    first, second = refund(workspace), refund(workspace, request_id="R-8", customer_id="C-2002")

    with pytest.raises(SensitiveNote, match=f"the customer_id of operation {second.key};"):
        sensitive_notes.refuse_sensitive_note("for C-2002", [first, second])


def test_it_says_who_reads_a_note(workspace):
    assert sensitive_notes.readers_of(workspace) == (
        "Visible to everyone in workspace demo, including viewers and operators, who do not see sensitive values: "
        "a note that quotes one is refused."
    )


# --- each service refuses, writes nothing; and keeps a note without the value -----------------


@pytest.mark.parametrize("verb", ["replay", "resolve", "cancel"])
def test_a_decision_on_an_operation_refuses_a_reason_quoting_a_sensitive_value(workspace, reviewer, verb):
    operation = needs_review(refund(workspace))
    decide = {
        "replay": replays.replay_operation,
        "resolve": lambda op, **kw: resolutions.resolve_operation(op, external_id="rec-1", **kw),
        "cancel": cancellations.cancel_operation,
    }[verb]
    before = written()

    with pytest.raises(review.SensitiveReason, match="contains the customer_id of this operation"):
        decide(operation, user=reviewer, reason="customer c-1001 asked")

    assert written() == before


def test_resolving_refuses_a_record_id_quoting_a_sensitive_value(workspace, reviewer):
    operation = needs_review(refund(workspace))
    before = written()

    with pytest.raises(review.SensitiveReason, match="^The record id contains the customer_id of this operation"):
        resolutions.resolve_operation(operation, user=reviewer, external_id="C-1001", reason="found it by hand")

    assert written() == before


def test_a_cancel_keeps_a_reason_without_the_value(workspace, reviewer):
    operation = needs_review(refund(workspace))

    cancellations.cancel_operation(operation, user=reviewer, reason="the customer asked, ticket T-55")

    assert AuditEvent.objects.get(kind="cancelled").message == "cancel: the customer asked, ticket T-55"


@pytest.mark.parametrize("decide", [conflict_decisions.apply_conflict, conflict_decisions.dismiss_conflict])
def test_a_conflict_decision_refuses_a_value_of_either_payload(workspace, person, decide):
    # An admin: applying a side of a conflict in the amount needs seeing it (ledger.people.may).
    reviewer = person("lead", "admin")
    refund(workspace)
    conflict = submit_event(
        workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND | {"amount_cents": 9900}}
    ).conflict
    before = written()

    with pytest.raises(ReviewError, match="contains the amount_cents of the incoming payload of conflict"):
        decide(conflict, user=reviewer, reason="99.00 is right")
    with pytest.raises(ReviewError, match="contains the customer_id of this operation"):
        decide(conflict, user=reviewer, reason="C-1001 confirmed")

    assert written() == before
    decide(conflict, user=reviewer, reason="the customer confirmed the new amount")
    assert Conflict.objects.get().status != Conflict.Status.OPEN


def test_deciding_many_conflicts_refuses_a_value_of_any_of_them(workspace, reviewer):
    refund(workspace)
    first = submit_event(
        workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND | {"amount_cents": 9900}}
    ).conflict
    second = submit_event(
        workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND | {"customer_id": "C-4"}}
    ).conflict
    before = written()

    with pytest.raises(ReviewError, match=f"the customer_id of the incoming payload of conflict {second.pk};"):
        conflict_decisions.dismiss_conflicts([first.pk, second.pk], user=reviewer, reason="not C-4's")
    with pytest.raises(ReviewError, match="the amount_cents"):
        conflict_decisions.apply_dismissing_the_rest(first, user=reviewer, reason="99.00", rest=[second.pk])

    assert written() == before


@pytest.mark.parametrize("decide", [approvals.approve_operation, approvals.reject_operation])
def test_an_approval_refuses_a_note_quoting_a_sensitive_value(workspace, approver, decide):
    operation = refund(workspace)
    before = written()

    with pytest.raises(approvals.SensitiveApprovalNote) as refused:
        decide(operation, user=approver, note="1,234.56 EUR to C-1001 is fine")

    assert str(refused.value).startswith("The note contains the ")
    assert written() == before
    decide(operation, user=approver, note="checked against the order")
    assert Approval.objects.get().note == "checked against the order"


def test_a_bulk_action_refuses_a_value_of_any_of_its_operations(workspace, reviewer):
    first = needs_review(refund(workspace))
    second = needs_review(refund(workspace, request_id="R-8", customer_id="C-2002"))
    before = written()

    with pytest.raises(bulk_actions.SensitiveBulkReason) as refused:
        bulk_actions.submit_bulk_action(
            user=reviewer, kind="cancel", reason="all but C-2002", token="t-1", operation_ids=[first.pk, second.pk]
        )

    assert str(refused.value).startswith(f"The reason contains the customer_id of operation {second.key};")
    assert written() == before
    bulk, created = bulk_actions.submit_bulk_action(
        user=reviewer, kind="cancel", reason="duplicates", token="t-2", operation_ids=[first.pk, second.pk]
    )
    assert created
    assert bulk.reason == "duplicates"


def test_a_reason_checked_at_submission_is_checked_again_per_operation(workspace, reviewer):
    # A conflict applied between the submission and the run gives an operation a new value: the
    # run skips it with the refusal rather than writing the value into its audit trail.
    operation = needs_review(refund(workspace))
    bulk, _ = bulk_actions.submit_bulk_action(
        user=reviewer, kind="cancel", reason="about C-5", token="t-1", operation_ids=[operation.pk]
    )
    Operation.objects.filter(pk=operation.pk).update(payload=REFUND | {"customer_id": "C-5"})

    bulk_actions.run_bulk_action(bulk.pk)

    item = BulkItem.objects.get(bulk_action=bulk)
    assert (item.outcome, item.detail) == ("skipped", REFUSED)
    assert not AuditEvent.objects.filter(kind="cancelled").exists()


def test_erase_finds_the_value_in_the_reason_in_any_case(workspace, person):
    boss = person("boss", "admin")
    with pytest.raises(erasure.ErasureError, match="The reason quotes the value"):
        erasure.erase_values(
            workspace=workspace, field="email", value="ann@example.com", user=boss, reason="ANN@Example.com"
        )


# --- management commands ------------------------------------------------------------------------


def test_a_command_refuses_a_reason_quoting_a_sensitive_value(workspace, reviewer):
    operation = needs_review(refund(workspace))
    before = written()

    with pytest.raises(CommandError, match="contains the customer_id of this operation"):
        call_command("cancel", operation.key, workspace="demo", username="operator", reason="C-1001 asked")

    assert written() == before


def test_a_command_refuses_a_note_quoting_a_sensitive_value(workspace, approver):
    operation = refund(workspace)
    before = written()

    with pytest.raises(CommandError, match="The note contains the amount_cents of this operation"):
        call_command("reject", operation.key, workspace="demo", username="approver", note="1234.56 is too much")

    assert written() == before


def test_a_conflict_command_refuses_a_reason_quoting_a_sensitive_value(workspace, reviewer):
    refund(workspace)
    conflict = submit_event(
        workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND | {"customer_id": "C-4"}}
    ).conflict

    with pytest.raises(CommandError, match="the customer_id of the incoming payload"):
        call_command("conflict", "dismiss", conflict.pk, username="operator", reason="c-4 is wrong")

    assert Conflict.objects.get().status == Conflict.Status.OPEN
