"""The operation page sets no traps: Mark succeeded only where a try may have
landed; Cancel asks the destination first where a replay would (found: succeeded, nothing
cancelled); an unknown operation's Last error is its try's, the lookup's below it; a refused
decision says why beside its button, checked by the server; no deadline on a final state.

Against the real stand-in with ``send-notice`` (its destination keeps no idempotency keys)."""

from html import unescape

import pytest
from django.contrib.messages import get_messages

from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, Operation
from tests.conftest import external_event
from tests.ledger.people.test_replay_safety import needing_review_after_a_failed_lookup

LOOKUP_503 = {"kind": "status", "status": 503, "error": "lookup_down", "detail": "search is resting"}


def page(client, operation) -> str:
    return client.get(f"/console/operations/{operation.pk}/").content.decode()


@pytest.fixture
def refused(workspace, standin) -> Operation:
    """A try the destination refused for good (HTTP 400): it acted on nothing."""
    standin.fail_next({"kind": "status", "status": 400, "error": "owner_unknown", "detail": "no such owner"})
    result = submit_event(workspace=workspace, raw=external_event("send-notice"), source="api")
    process_due_operations(worker="w1")
    operation = Operation.objects.get(pk=result.operation.pk)
    assert operation.state == "needs_review"
    return operation


@pytest.fixture
def acted_and_lost(workspace, standin, time_machine, settings):
    settings.OPSCONSOLE_RECONCILE_GIVE_UP_SECONDS = 0
    return needing_review_after_a_failed_lookup(workspace, standin, {"kind": "drop_after_commit"}, time_machine)


@pytest.fixture
def never_acted(workspace, standin, time_machine, settings):
    settings.OPSCONSOLE_RECONCILE_GIVE_UP_SECONDS = 0
    return needing_review_after_a_failed_lookup(workspace, standin, {"kind": "reset_before"}, time_machine)


# Mark succeeded only where a try may have landed.


def test_mark_succeeded_is_not_offered_after_a_definite_refusal(client, login, refused):
    login("operator")
    html = page(client, refused)
    assert ">Replay</button>" in html
    assert ">Cancel</button>" in html
    assert ">Mark succeeded</button>" not in html


def test_the_service_refuses_to_mark_succeeded_what_no_try_could_have_made(client, login, refused):
    login("operator")
    response = client.post(
        f"/console/operations/{refused.pk}/resolve/", {"external_id": "rec-9", "reason": "saw it"}, follow=True
    )

    refused.refresh_from_db()
    assert refused.state == "needs_review"
    assert not AuditEvent.objects.filter(operation=refused, kind="resolved").exists()
    [message] = [m.message for m in get_messages(response.wsgi_request)] or [
        m.message for m in response.context["messages"]
    ]
    assert message.startswith(f"Every try of {refused.key} was refused before it acted")


def test_mark_succeeded_is_offered_where_a_try_may_have_landed(client, login, acted_and_lost):
    login("operator")
    assert ">Mark succeeded</button>" in page(client, acted_and_lost)


# Cancel asks the destination first.


def test_cancel_finds_the_record_and_cancels_nothing(client, login, acted_and_lost, standin):
    [record] = standin.records()
    login("operator")
    assert "Cancel asks it first" in page(client, acted_and_lost) or "Replay asks the" in page(client, acted_and_lost)

    response = client.post(f"/console/operations/{acted_and_lost.pk}/cancel/", {"reason": "customer withdrew"})

    acted_and_lost.refresh_from_db()
    assert (acted_and_lost.state, acted_and_lost.external_id) == ("succeeded", record["id"])
    event = AuditEvent.objects.get(operation=acted_and_lost, kind="reconciled_on_cancel")
    assert "nothing was cancelled" in event.message
    assert "customer withdrew" in event.message
    assert not AuditEvent.objects.filter(operation=acted_and_lost, kind="cancelled").exists()
    [message] = [m.message for m in get_messages(response.wsgi_request)]
    assert message == (
        f"Nothing was cancelled: the destination has record {record['id']}. {acted_and_lost.key} is now succeeded."
    )


def test_cancel_of_what_never_landed_says_the_destination_has_no_record(client, login, never_acted):
    login("operator")

    response = client.post(f"/console/operations/{never_acted.pk}/cancel/", {"reason": "not needed"})

    never_acted.refresh_from_db()
    assert never_acted.state == "cancelled"
    [message] = [m.message for m in get_messages(response.wsgi_request)]
    assert message == f"Cancelled {never_acted.key} (the destination has no record)."
    event = AuditEvent.objects.get(operation=never_acted, kind="cancelled")
    assert event.message == "cancel: not needed; the destination has no record"


def test_cancel_when_the_destination_cannot_tell_cancels_and_says_so(client, login, acted_and_lost, standin):
    login("operator")
    standin.fail_next_lookup(LOOKUP_503)

    client.post(f"/console/operations/{acted_and_lost.pk}/cancel/", {"reason": "not needed"})

    acted_and_lost.refresh_from_db()
    assert acted_and_lost.state == "cancelled"
    message = AuditEvent.objects.get(operation=acted_and_lost, kind="cancelled").message
    assert message.startswith("cancel: not needed; the destination cannot tell whether it acted: lookup failed")
    assert "[lookup_down]" in message


def test_cancel_of_a_definite_refusal_asks_nobody(client, login, refused, standin):
    login("operator")
    standin.fail_next_lookup(LOOKUP_503)  # would show in the message if a lookup were made

    client.post(f"/console/operations/{refused.pk}/cancel/", {"reason": "owner gone"})

    refused.refresh_from_db()
    assert refused.state == "cancelled"
    assert AuditEvent.objects.get(operation=refused, kind="cancelled").message == "cancel: owner gone"


# Last error: the try's, the lookup's below it.


def test_an_unknown_operations_last_error_is_its_tries_and_the_lookups_below(client, login, workspace, standin):
    standin.fail_next({"kind": "status", "status": 500, "error": "db_timeout", "detail": "try again"})
    result = submit_event(workspace=workspace, raw=external_event("send-notice"), source="api")
    process_due_operations(worker="w1")
    operation = Operation.objects.get(pk=result.operation.pk)
    assert operation.state == "unknown"
    standin.fail_next_lookup(LOOKUP_503)
    login("operator")
    client.post(f"/console/operations/{operation.pk}/look-up/")

    html = page(client, operation)

    try_error = html.split('id="last-try-error">', 1)[1].split("</dd>", 1)[0]
    lookup = html.split('id="last-lookup">', 1)[1].split("</dd>", 1)[0]
    assert "HTTP 500 from 127.0.0.1 [db_timeout]: try again" in try_error
    assert "(try 1)" in try_error
    assert "lookup 1 failed" in lookup
    assert "[lookup_down]" in lookup


# A refused decision says why beside its button; the server checks.


@pytest.mark.parametrize("verb", ["cancel", "replay"])
def test_a_missing_reason_is_refused_by_the_server_beside_the_button(client, login, refused, verb):
    login("operator")

    response = client.post(f"/console/operations/{refused.pk}/{verb}/", {"reason": "  "}, follow=True)

    refused.refresh_from_db()
    assert refused.state == "needs_review"
    html = response.content.decode()
    beside = html.split('<p class="field-error" id="operation-reason-refused" role="alert">', 1)[1].split("</p>", 1)[0]
    assert beside == "Reason is required; nothing was changed."
    banner = html.split('<div class="messages">', 1)[1].split("</div>", 1)[0]
    assert "Reason is required" not in banner  # not in the banner as well
    assert 'aria-describedby="operation-reason-refused operation-reason-readers"' in html
    assert "see why, beside the field" in banner


def test_a_refusal_whose_form_is_gone_is_shown_in_the_banner(client, login, refused):
    login("operator")
    client.post(f"/console/operations/{refused.pk}/cancel/", {"reason": "done"})
    response = client.post(f"/console/operations/{refused.pk}/cancel/", {"reason": "again"}, follow=True)

    banner = response.content.decode().split('<div class="messages">', 1)[1].split("</div>", 1)[0]
    assert f"{refused.key} is cancelled; only" in banner
    assert "can be cancelled" in banner


# No deadline on a final state.


def test_a_final_operation_shows_no_deadline(client, login, refused):
    login("operator")
    assert "<dt>Deadline</dt>" in page(client, refused)
    client.post(f"/console/operations/{refused.pk}/cancel/", {"reason": "owner gone"})
    assert "<dt>Deadline</dt>" not in page(client, refused)


def test_a_viewer_is_not_told_an_operator_could_mark_succeeded_after_a_definite_refusal(client, login, refused):
    # What the page says others could do is the service's rule too: no record after refusals alone.
    login("viewer")
    said = " ".join(unescape(page(client, refused)).split())
    assert "an operator or admin of workspace demo can replay it or cancel it" in said
    assert "resolve it with the destination's record id" not in said
