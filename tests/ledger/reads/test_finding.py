"""Finding an operation by any id it is known by (ledger.reads.finding): each field finds it, a near miss
finds nothing, and another workspace's operations are never found, whatever the id."""

import pytest
from django.utils import timezone

from ledger.core import accounts
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import record_blocked_delivery, submit_event
from ledger.models import Attempt, Delivery, Operation
from ledger.reads import finding
from ledger.reads.finding import FindError, find_operations
from tests.conftest import event, external_event
from tests.ledger.conftest import submit_brief


@pytest.fixture
def viewer(person):
    return person("viewer", "viewer")


@pytest.fixture
def other(db):
    workspace, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    return workspace


@pytest.fixture
def sent(workspace, standin):
    """A file-ticket that succeeded at the stand-in destination, the real way: it has a record id."""
    operation = submit_event(
        workspace=workspace,
        source="api",
        raw=external_event("file-ticket", delivery_id="d-ticket") | {"correlation_id": "flow-7"},
    ).operation
    process_due_operations(worker="w1")
    operation.refresh_from_db()
    assert operation.state == "succeeded"
    assert operation.external_id
    return operation


def found(text, user) -> dict[int, list[str]]:
    return {match.operation.pk: match.fields for match in find_operations(text, user=user).matches}


def test_it_finds_an_operation_by_the_start_of_its_key_in_any_case(workspace, viewer):
    brief = submit_brief(workspace)
    assert found("DEMO:r-42:v3", viewer) == {brief.pk: ["key (its start)"]}
    assert found(brief.key, viewer) == {brief.pk: ["key (its start)"]}
    assert found("r-42:v3", viewer) == {}  # a key is found by its start only


def test_it_finds_an_operation_by_its_whole_request_id_in_any_case(workspace, viewer):
    brief = submit_brief(workspace, request_id="R-42")
    submit_brief(workspace, request_id="R-420")
    assert found("r-42", viewer) == {brief.pk: ["request id"]}
    assert found("R-4", viewer) == {}


def test_it_finds_an_operation_by_the_record_id_its_destination_gave(sent, viewer):
    # Its attempt holds the same record id: said once.
    assert sent.attempt_rows.get().external_id == sent.external_id
    assert found(sent.external_id, viewer) == {sent.pk: ["destination record id"]}
    assert found(sent.external_id[:-1], viewer) == {}


def test_it_finds_an_operation_by_the_record_id_of_an_attempt_it_never_recorded(workspace, viewer):
    """A try whose worker lost its claim keeps the record id the destination answered with; the
    operation has none (it is being tried again, or is unknown)."""
    brief = submit_brief(workspace)
    Attempt.objects.create(
        operation=brief,
        number=1,
        fencing_token=1,
        started_at=timezone.now(),
        finished_at=timezone.now(),
        outcome="stale",
        external_id="rec-lost-1",
    )
    assert found("rec-lost-1", viewer) == {brief.pk: ["destination record id of an attempt"]}


def test_it_finds_an_operation_by_the_delivery_id_of_any_of_its_deliveries(workspace, viewer):
    first = submit_event(workspace=workspace, source="api", raw=event(delivery_id="d-first")).operation
    submit_event(workspace=workspace, source="api", raw=event(delivery_id="d-again"))  # a duplicate
    assert found("d-first", viewer) == found("d-again", viewer) == {first.pk: ["delivery id"]}
    assert found("d-firs", viewer) == {}


def test_it_finds_an_operation_by_a_deliverys_own_number(workspace, viewer):
    brief = submit_brief(workspace)
    delivery = brief.deliveries.get()
    assert found(str(delivery.pk), viewer) == {brief.pk: ["delivery number (#)"]}
    assert found(str(delivery.pk + 1000), viewer) == {}


def test_it_finds_an_operation_by_its_correlation_id_and_its_deliveries(workspace, viewer):
    brief = submit_event(workspace=workspace, source="api", raw=event() | {"correlation_id": "flow-1"}).operation
    assert brief.correlation_id == "flow-1"
    # A later delivery of the same event, under another flow's correlation id.
    submit_event(workspace=workspace, source="api", raw=event(delivery_id="d-2") | {"correlation_id": "flow-2"})
    assert found("flow-1", viewer) == found("flow-2", viewer) == {brief.pk: ["correlation id"]}
    assert found("flow", viewer) == {}


def test_it_says_every_field_an_operation_matched(sent, viewer):
    Delivery.objects.filter(operation=sent).update(sender_delivery_id=sent.external_id)
    assert found(sent.external_id, viewer)[sent.pk] == ["destination record id", "delivery id"]


def test_it_returns_the_arrivals_with_the_id_that_became_no_operation(workspace, viewer):
    record_blocked_delivery(
        workspace=workspace,
        source="api",
        reason="invalid_input",
        http_status=422,
        errors=[{"field": "data.version", "message": "Input should be a valid integer"}],
        raw={"action": "prepare-brief", "delivery_id": "d-bad", "data": {}},
    )
    result = find_operations("d-bad", user=viewer)
    assert result.matches == []
    assert [(d.outcome, d.errors[0]["field"]) for d in result.refused] == [("invalid", "data.version")]


def test_it_never_finds_another_workspaces_operations(other, person, standin):
    """Whatever the id, an operation of a workspace the person is not a member of is not found."""
    mine = person("mine", "admin")  # of "demo" only
    theirs = submit_event(
        workspace=other,
        source="api",
        raw=external_event("file-ticket", delivery_id="d-theirs") | {"correlation_id": "flow-theirs"},
    ).operation
    process_due_operations(worker="w1")
    theirs.refresh_from_db()
    record_blocked_delivery(
        workspace=other,
        source="api",
        reason="invalid_input",
        http_status=422,
        errors=[],
        raw={"delivery_id": "d-theirs"},
    )
    ids = [theirs.key, "r-42", theirs.external_id, "d-theirs", str(theirs.deliveries.get().pk), "flow-theirs"]
    for text in ids:
        result = find_operations(text, user=mine)
        assert (result.matches, result.refused) == ([], []), text
    boss = person("boss", "viewer", workspaces=["other"])
    for text in ids:
        assert theirs.pk in found(text, boss), text


def test_a_superuser_finds_in_every_workspace(other, admin_user):
    theirs = submit_brief(other)
    assert found("r-42", admin_user) == {theirs.pk: ["request id"]}


def test_many_deliveries_of_one_operation_count_as_one_match(workspace, viewer):
    """A flow that redelivered one event more times than the list holds finds it once, and not
    "more": the bound is on operations, not on the deliveries that name them."""
    for number in range(finding.LIMIT + 2):
        raw = event(delivery_id=f"d-{number}") | {"correlation_id": "flow-1"}
        submit_event(workspace=workspace, source="api", raw=raw)
    result = find_operations("flow-1", user=viewer)
    assert (len(result.matches), result.more) == (1, False)


def test_it_lists_a_bounded_number_and_says_more_matched(workspace, viewer):
    for number in range(finding.LIMIT + 2):
        submit_brief(workspace, request_id=f"R-{number}")
    result = find_operations("demo:", user=viewer)
    assert len(result.matches) == finding.LIMIT
    assert result.more


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "Type a key"),
        ("   ", "Type a key"),
        (None, "Type a key"),
        ("x" * 501, "501 characters long"),
        ("R-1\nR-2", "control character"),
        ("R-1\x00", "control character"),
    ],
)
def test_it_refuses_what_cannot_be_an_id(viewer, text, said):
    with pytest.raises(FindError, match=said):
        find_operations(text, user=viewer)


def test_it_trims_what_was_typed(workspace, viewer):
    brief = submit_brief(workspace)
    assert found(f"  {brief.key}\t", viewer) == {brief.pk: ["key (its start)"]}


def test_it_finds_nothing_for_a_person_of_no_workspace(workspace, person):
    submit_brief(workspace)
    assert found("R-42", person("nobody")) == {}
    assert Operation.objects.count() == 1
