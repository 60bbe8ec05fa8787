"""Recovering an operation whose try may have reached its destination, from the operation page:
the page says what waits and when, Replay names the duplicate risk and refuses it by default,
"Look up now" asks the destination at once, "Mark succeeded" records what a person found."""

import re

import pytest
from django.contrib.messages import get_messages

from ledger.models import AuditEvent, Operation
from reconciliation.reconcile import reconcile_operation

LOOKUP_503 = {"kind": "status", "status": 503}


def messages_of(response) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]


@pytest.fixture
def unknown(unknown_notice):
    return unknown_notice


@pytest.fixture
def needing_review_after_lookup(unknown, standin, settings):
    settings.OPSCONSOLE_RECONCILE_GIVE_UP_SECONDS = 0
    standin.fail_next_lookup(LOOKUP_503)
    assert reconcile_operation(unknown, asked_by_person=True) == "gave_up"
    unknown.refresh_from_db()
    return unknown


def page(client, operation) -> str:
    return client.get(f"/console/operations/{operation.pk}/").content.decode()


def test_it_says_when_an_unknown_operation_is_next_looked_up(client, login, unknown):
    login("operator")

    html = page(client, unknown)

    assert "The last try may have reached the destination and its answer was lost." in html
    assert f"{unknown.next_attempt_at:%Y-%m-%d %H:%M:%S} UTC</time>" in html
    assert re.search(r"next lookup at <time datetime=\S+\+00:00\">", html)
    assert "it keeps asking until <time datetime=" in html
    assert "<dt>Next lookup</dt>" in html
    assert ">Look up now</button>" in html
    assert ">Mark succeeded</button>" in html
    assert ">Replay</button>" not in html  # unknown is not replayed: it is looked up


def test_it_looks_up_now_and_records_the_found_record(client, login, unknown, standin):
    login("operator")

    response = client.post(f"/console/operations/{unknown.pk}/look-up/")

    assert messages_of(response) == [("success", f"The destination has the record: {unknown.key} is now succeeded.")]
    unknown.refresh_from_db()
    assert (unknown.state, unknown.external_id) == ("succeeded", standin.records()[0]["id"])
    assert AuditEvent.objects.get(kind="reconciled_found").actor == "operator"


def test_it_reports_a_lookup_that_could_not_tell(client, login, unknown, standin):
    login("operator")
    standin.fail_next_lookup(LOOKUP_503)

    [(level, message)] = messages_of(client.post(f"/console/operations/{unknown.pk}/look-up/"))

    unknown.refresh_from_db()
    assert level == "warning"
    assert message == (
        "The destination could not tell (lookup 1 failed: lookup failed: HTTP 503 from 127.0.0.1 [injected_fault]: "
        f"status 503); "
        f"{unknown.key} stays unknown and is asked again at {unknown.next_attempt_at:%Y-%m-%d %H:%M:%S} "
        "UTC."
    )
    assert AuditEvent.objects.get(kind="lookup_failed").actor == "operator"


def test_it_names_the_duplicate_risk_next_to_replay(client, login, needing_review_after_lookup):
    login("operator")

    html = page(client, needing_review_after_lookup)

    assert "A try of this operation may have reached the destination. Replay asks the" in html
    assert 'name="accept_duplicate_risk"' in html
    assert "checked" not in html.split('name="accept_duplicate_risk"')[1].split(">")[0]  # never the default


def test_it_refuses_a_replay_the_destination_cannot_vouch_for(client, login, needing_review_after_lookup, standin):
    login("operator")
    standin.fail_next_lookup(LOOKUP_503)

    [(level, message)] = messages_of(
        client.post(f"/console/operations/{needing_review_after_lookup.pk}/replay/", {"reason": "customer asks"})
    )

    assert level == "error"
    assert message.startswith("Replay refused: the destination cannot tell")
    assert Operation.objects.get().state == "needs_review"


def test_it_replays_accepting_the_risk_when_the_box_is_ticked(client, login, needing_review_after_lookup, standin):
    login("operator")
    standin.fail_next_lookup(LOOKUP_503)

    [(level, message)] = messages_of(
        client.post(
            f"/console/operations/{needing_review_after_lookup.pk}/replay/",
            {"reason": "vendor shows nothing", "accept_duplicate_risk": "on"},
        )
    )

    assert level == "success"
    assert "accepting the duplicate risk" in message
    assert Operation.objects.get().state == "pending"
    assert AuditEvent.objects.get(kind="replay_forced").actor == "operator"


def test_it_replays_into_success_when_the_destination_has_the_record(client, login, needing_review_after_lookup):
    login("operator")

    [(level, message)] = messages_of(
        client.post(f"/console/operations/{needing_review_after_lookup.pk}/replay/", {"reason": "customer asks"})
    )

    assert (level, message) == (
        "success",
        f"Nothing was sent: the destination has record rec-1. {needing_review_after_lookup.key} is now succeeded.",
    )


def test_it_marks_an_operation_succeeded_with_the_record_a_person_found(client, login, unknown):
    login("operator")

    response = client.post(
        f"/console/operations/{unknown.pk}/resolve/", {"external_id": "rec-1", "reason": "vendor portal"}
    )

    assert messages_of(response) == [("success", f"Resolved {unknown.key}: succeeded with destination record rec-1.")]
    unknown.refresh_from_db()
    assert (unknown.state, unknown.external_id) == ("succeeded", "rec-1")


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"external_id": "", "reason": "x"}, "Destination record id is required; nothing was changed."),
        (
            {"external_id": "r" * 201, "reason": "x"},
            "Destination record id: Ensure this value has at most 200 characters (it has 201). Nothing was changed.",
        ),
        ({"external_id": "rec\x011", "reason": "x"}, "The record id must be printable text of at most 200 characters."),
    ],
)
def test_it_refuses_a_resolution_without_a_usable_record_id(client, login, unknown, form, message):
    login("operator")

    response = client.post(f"/console/operations/{unknown.pk}/resolve/", form)

    assert messages_of(response) == [("error", message)]
    assert Operation.objects.get().state == "unknown"
