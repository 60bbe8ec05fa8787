"""The console and an operation held by a conflict (on_conflict: hold): the queue and the inbox say
why, its page offers the conflict's decision and neither replay nor mark succeeded, a decision from
its page releases it, and the inbox's cost stays bounded however many of its groups are held."""

import pytest
from django.urls import reverse

from ledger.intake.submit import submit_event
from ledger.models import Conflict, Delivery, Operation
from opsconsole.console.conflicts import PAGE_SIZE
from tests.console.test_query_counts import CONFLICTS_QUERIES, crowded, someone  # noqa: F401

HELD = "held: a conflicting delivery arrived"


@pytest.fixture
def held(workspace, scripted_action):
    """A refund-like operation held by a conflicting delivery, through intake."""
    from tests.ledger.conftest import NoteData

    action = scripted_action(
        schema=NoteData, fingerprint_fields=("request_id", "version", "note"), on_conflict="hold", external=True
    )
    for note in ("first", "second"):
        data = {"request_id": "R-1", "version": 1, "note": note}
        submit_event(workspace=workspace, source="api", raw={"action": action.name, "data": data})
    operation = Operation.objects.get()
    assert operation.state == "needs_review"
    return operation


def text(response) -> str:
    return " ".join(response.content.decode().split())


def test_the_queue_says_why_a_held_operation_needs_review(client, login, held):
    login("operator")

    row = text(client.get("/console/"))

    assert held.key in row
    assert HELD in row


def test_the_inbox_lists_it_held_first_and_offers_to_release_it(client, login, held):
    login("operator")

    response = client.get(reverse("console:conflicts"))

    [row] = response.context["held"]
    assert (row["held"], row["can_apply"], row["awaits_approval"]) == (True, True, False)
    page = text(response)
    assert "held by this conflict" in page
    assert "Apply incoming and release</button>" in page
    assert "Dismiss and release</button>" in page


def test_the_operation_page_offers_the_decision_not_a_replay_or_a_record_found(client, login, held):
    login("operator")

    response = client.get(reverse("console:operation", args=[held.pk]))

    page = text(response)
    assert "Held for review: a conflicting delivery arrived before this operation ran" in page
    assert response.context["held_by_conflict"]
    assert not response.context["can_replay"]
    assert not response.context["can_resolve"]
    assert response.context["can_cancel"]
    assert ">Replay</button>" not in page
    assert "Mark succeeded" not in page
    assert "Apply incoming payload" in page


def test_dismissing_from_the_operation_page_releases_it(client, login, held):
    login("operator")
    conflict = Conflict.objects.get()

    response = client.post(
        reverse("console:dismiss_conflict", args=[conflict.pk]), {"reason": "a stale resend"}, follow=True
    )

    assert response.status_code == 200
    held.refresh_from_db()
    assert (held.state, held.last_error_category) == ("pending", "")
    assert "Held for review" not in text(response)


def test_a_viewer_is_told_who_may_release_it(client, login, held):
    login("viewer")

    page = text(client.get(reverse("console:operation", args=[held.pk])))

    assert "apply or dismiss its conflict" in page
    assert "replay it" not in page


def test_the_inbox_costs_one_more_query_when_its_rows_are_held(
    client,
    crowded,  # noqa: F811
    someone,  # noqa: F811
    workspace,
    django_assert_max_num_queries,
):
    """Every operation of the page held, each with a conflict: one query reads where they were held."""
    others = list(Operation.objects.exclude(pk=crowded.pk))
    deliveries = Delivery.objects.bulk_create(
        [Delivery(workspace=workspace, operation=op, source="api", outcome="conflict", key=op.key) for op in others]
    )
    Conflict.objects.bulk_create(
        [
            Conflict(
                operation=delivery.operation,
                delivery=delivery,
                incoming_fingerprint="f",
                incoming_payload={},
                differences=[{"field": "version", "recorded": 1, "incoming": 2}],
            )
            for delivery in deliveries
        ]
    )
    Operation.objects.update(last_error_category="conflict", attempts=0)  # all held (test setup only)

    with django_assert_max_num_queries(CONFLICTS_QUERIES + 1):
        response = client.get(reverse("console:conflicts"), {"state": "held"})

    rows = response.context["held"]
    assert len(rows) == PAGE_SIZE
    assert all(row["held"] for row in rows)
    assert not any(row["can_apply"] for row in rows)  # no conflict_held event: the safer way back
