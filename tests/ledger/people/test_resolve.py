"""A person who checked the destination by hand records what they found: an unknown operation, or
one that needs review, becomes succeeded with the destination's record id, audited."""

import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ledger.models import AuditEvent, Operation
from ledger.people import may, resolutions, review
from reconciliation.reconcile import reconcile_unknown_operations
from tests.ledger.conftest import submit_brief


@pytest.fixture
def unknown(unknown_notice):
    return unknown_notice


@pytest.mark.parametrize("state", ["unknown", "needs_review"])
def test_it_resolves_with_the_record_id_the_person_found(unknown, standin, reviewer, state):
    Operation.objects.filter(pk=unknown.pk).update(state=state)
    unknown.refresh_from_db()
    [record] = standin.records()

    resolutions.resolve_operation(
        unknown, user=reviewer, external_id=f" {record['id']} ", reason="found it in the vendor portal"
    )

    unknown.refresh_from_db()
    assert (unknown.state, unknown.external_id, unknown.last_error) == ("succeeded", record["id"], None)
    assert unknown.result == {"external_id": record["id"], "resolved_by": "operator"}
    event = AuditEvent.objects.get(kind="resolved")
    assert (event.actor, event.from_state, event.to_state) == ("operator", state, "succeeded")
    assert event.message == (
        f"resolved by hand: the destination has record {record['id']}: found it in the vendor portal"
    )


def test_it_leaves_nothing_for_reconciliation_to_do_afterwards(unknown, standin, reviewer):
    resolutions.resolve_operation(unknown, user=reviewer, external_id="rec-1", reason="checked")

    assert reconcile_unknown_operations().found == 0
    assert standin.requests("GET /records") == 0


@pytest.mark.parametrize(
    ("external_id", "reason", "message"),
    [
        ("", "checked", "Give the destination's record id you found."),
        ("  ", "checked", "Give the destination's record id you found."),
        ("rec-1\n", "checked", None),  # trailing white space is trimmed: accepted
        ("rec\x001", "checked", "The record id must be printable text of at most 200 characters."),
        ("r" * 201, "checked", "The record id must be printable text of at most 200 characters."),
        ("rec-1", " ", "Say how you checked the destination"),
    ],
)
def test_it_refuses_a_resolution_without_evidence(unknown, reviewer, external_id, reason, message):
    if message is None:
        resolutions.resolve_operation(unknown, user=reviewer, external_id=external_id, reason=reason)
        assert Operation.objects.get().external_id == "rec-1"
        return
    with pytest.raises(review.ReviewError, match=re.escape(message)):
        resolutions.resolve_operation(unknown, user=reviewer, external_id=external_id, reason=reason)
    assert Operation.objects.get().state == "unknown"
    assert not AuditEvent.objects.filter(kind="resolved").exists()


@pytest.mark.parametrize("state", ["pending", "retrying", "processing", "succeeded", "cancelled"])
def test_it_refuses_to_resolve_an_operation_that_is_not_waiting_for_evidence(unknown, reviewer, state):
    Operation.objects.filter(pk=unknown.pk).update(state=state)
    unknown.refresh_from_db()

    with pytest.raises(
        review.ReviewError, match=f"Only an unknown operation or one that needs review can be resolved; .* is {state}."
    ):
        resolutions.resolve_operation(unknown, user=reviewer, external_id="rec-1", reason="checked")
    assert Operation.objects.get().state == state


@pytest.mark.parametrize("state", ["retrying", "succeeded"])
def test_the_page_refuses_in_the_words_of_the_service(unknown, reviewer, state):
    # A try that may have landed does not make a retrying operation resolvable: the state decides first.
    Operation.objects.filter(pk=unknown.pk).update(state=state)
    unknown.refresh_from_db()

    offered = may.what_may(reviewer, unknown).mark_succeeded
    with pytest.raises(review.ReviewError) as refused:
        resolutions.resolve_operation(unknown, user=reviewer, external_id="rec-1", reason="checked")
    assert (bool(offered), offered.refusal, offered.by_role) == (False, str(refused.value), False)


def test_a_viewer_is_refused_by_role_where_an_operator_could(unknown, person):
    viewer = person("viewer", "viewer")

    offered = may.what_may(viewer, unknown)
    assert not offered.review
    assert not offered.mark_succeeded
    assert offered.mark_succeeded.by_role
    assert offered.mark_succeeded.open_to_the_role
    assert offered.look_up.open_to_the_role
    assert "viewer may not replay, resolve, cancel or decide conflicts" in offered.mark_succeeded.refusal


def test_it_refuses_an_internal_action(workspace, reviewer):
    operation = submit_brief(workspace)
    Operation.objects.filter(pk=operation.pk).update(state="needs_review")
    operation.refresh_from_db()

    with pytest.raises(review.ReviewError, match="prepare-brief has no external destination"):
        resolutions.resolve_operation(operation, user=reviewer, external_id="draft-1", reason="x")


def test_it_needs_the_review_permission(unknown, person):
    viewer = person("viewer", "viewer")

    with pytest.raises(review.ReviewError, match="viewer may not replay, resolve, cancel or decide conflicts"):
        resolutions.resolve_operation(unknown, user=viewer, external_id="rec-1", reason="checked")
    assert Operation.objects.get().state == "unknown"


def test_it_refuses_a_resolution_that_lost_a_race(unknown, reviewer, standin):
    stale_copy = Operation.objects.get(pk=unknown.pk)
    resolutions.resolve_operation(unknown, user=reviewer, external_id="rec-1", reason="first")

    # The stale copy still says unknown, but the guarded write sees the row has moved on.
    with pytest.raises(review.ReviewError, match="changed meanwhile"):
        resolutions.resolve_operation(stale_copy, user=reviewer, external_id="rec-2", reason="second")
    assert Operation.objects.get().external_id == "rec-1"


def test_it_resolves_from_the_command_line(unknown, reviewer):
    out = StringIO()
    call_command(
        "resolve",
        unknown.key,
        "--workspace",
        "demo",
        "--external-id",
        "rec-1",
        "--as",
        "operator",
        "--reason",
        "vendor portal",
        stdout=out,
    )

    assert out.getvalue().strip() == f"{unknown.key} is now succeeded with destination record rec-1."
    assert AuditEvent.objects.get(kind="resolved").actor == "operator"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--as", "nobody"], "No active user 'nobody'."),
        (["--as", "viewer"], "viewer may not replay, resolve, cancel or decide conflicts"),
        (["--as", "operator", "--workspace", "other"], "No operation"),
    ],
)
def test_it_explains_a_refused_resolution_on_the_command_line(unknown, reviewer, person, args, message):
    person("viewer", "viewer")
    base = {"--workspace": "demo", "--external-id": "rec-1", "--reason": "x"}
    overrides = dict(zip(args[::2], args[1::2], strict=True))
    argv = [item for pair in (base | overrides).items() for item in pair]

    with pytest.raises(CommandError, match=re.escape(message)):
        call_command("resolve", unknown.key, *argv, stdout=StringIO())
    assert Operation.objects.get().state == "unknown"
