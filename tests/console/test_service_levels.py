"""The service-levels page: per action, the unfinished operations at risk (past 80 % of the action's
service level) and late (past all of it), and the oldest of them, for the person's workspaces."""

from datetime import timedelta

import pytest

from ledger.core.selectors import service_level_standing
from ledger.engine.processing import process_due_operations
from ledger.models import Operation
from tests.conftest import IN_INDEX_ORDER
from tests.ledger.conftest import START, submit_brief


@pytest.fixture
def frozen(time_machine):
    time_machine.move_to(START, tick=False)
    return time_machine


def test_it_counts_at_risk_and_late_unfinished_work_per_action(
    client, login, workspace, frozen, django_assert_max_num_queries
):
    done = submit_brief(workspace, request_id="R-0")
    process_due_operations()
    late = submit_brief(workspace, request_id="R-1")  # prepare-brief: 5 minutes
    frozen.move_to(START + timedelta(seconds=90), tick=False)
    at_risk = submit_brief(workspace, request_id="R-2")
    frozen.move_to(START + timedelta(minutes=5), tick=False)
    submit_brief(workspace, request_id="R-3")  # on time
    frozen.move_to(START + timedelta(minutes=6), tick=False)
    Operation.objects.filter(pk=done.pk).update(created_at=START - timedelta(hours=1))  # finished: never late
    login("viewer")

    # The session, the person and their workspaces; then per action with a service level two
    # capped counts and its oldest (ledger.core.selectors): as many whatever the backlog. On PostgreSQL
    # they are read in index order, between two planner settings.
    with django_assert_max_num_queries(3 + 3 * actions_with_a_service_level() + IN_INDEX_ORDER):
        response = client.get("/console/service-levels/")

    levels = {row["level"].action: row["level"] for row in response.context["levels"]}
    assert (levels["prepare-brief"].at_risk, levels["prepare-brief"].late) == (1, 1)
    assert (levels["file-ticket"].at_risk, levels["file-ticket"].late) == (0, 0)
    assert [op.pk for op in response.context["operations"]] == [late.pk, at_risk.pk]
    page = response.content.decode()
    assert "<strong>late</strong>: past its 5 min" in page
    assert "at risk: 5 min allowed" in page
    assert "6 min" in page
    assert "4 min" in page


def actions_with_a_service_level() -> int:
    from ledger.actions import registry

    return sum(action.service_level is not None for action in registry.values())


def test_counts_stop_at_the_cap_and_say_so(client, login, workspace, frozen, monkeypatch):
    """A backlog of millions is counted no further than COUNT_CAP: the page says "N+"."""
    from ledger.core import selectors

    monkeypatch.setattr(selectors, "COUNT_CAP", 2)
    for n in range(3):
        submit_brief(workspace, request_id=f"L-{n}")
    frozen.move_to(START + timedelta(minutes=4, seconds=30), tick=False)
    submit_brief(workspace, request_id="AT-RISK")
    frozen.move_to(START + timedelta(minutes=9), tick=False)  # the three late, the fourth at risk
    login("viewer")

    response = client.get("/console/service-levels/")

    level = {row["level"].action: row["level"] for row in response.context["levels"]}["prepare-brief"]
    assert (level.late, level.late_capped, level.at_risk, level.at_risk_capped) == (2, True, 1, False)
    page = response.content.decode()
    assert '<span class="badge state-needs_review">2+</span>' in page
    assert '<span class="badge state-retrying">1</span>' in page


def test_the_oldest_are_listed_across_actions_in_arrival_order(workspace, frozen):
    """Each action's oldest are read apart (one range of its index each), then merged: the list
    is still the oldest first, whatever the action, and no longer than WORST."""
    from ledger.core import selectors
    from ledger.intake.submit import submit_event

    def notice(n):
        result = submit_event(
            workspace=workspace,
            source="api",
            raw={
                "action": "send-notice",
                "data": {"request_id": f"N-{n}", "version": 1, "summary": "Renewal due", "owner": "ops"},
            },
        )
        assert result.outcome == "accepted", result
        return result.operation

    arrived = []
    for n in range(3):
        arrived.append(submit_brief(workspace, request_id=f"B-{n}"))
        frozen.shift(timedelta(seconds=1))
        arrived.append(notice(n))
        frozen.shift(timedelta(seconds=1))
    now = START + timedelta(days=3)

    _, listed = service_level_standing(Operation.objects.all(), now=now)
    assert [operation.pk for operation in listed] == [operation.pk for operation in arrived]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(selectors, "WORST", 4)
        _, listed = service_level_standing(Operation.objects.all(), now=now)
    assert [operation.pk for operation in listed] == [operation.pk for operation in arrived[:4]]


def test_it_shows_only_the_persons_workspaces(client, login, workspace, frozen):
    from ledger.core import accounts

    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    submit_brief(other, request_id="R-9")
    frozen.move_to(START + timedelta(hours=1), tick=False)
    login("viewer")

    response = client.get("/console/service-levels/")

    assert response.context["operations"] == []
    assert "Nothing is at risk or late." in response.content.decode()


def test_the_standing_counts_work_held_by_a_pause_too(workspace, frozen):
    from ledger.people import pause

    submit_brief(workspace)
    pause.set_paused(paused=True, reason="incident", workspace=workspace, actor="test")

    levels, listed = service_level_standing(Operation.objects.all(), now=START + timedelta(minutes=10))

    assert {level.action: level.late for level in levels}["prepare-brief"] == 1
    assert listed[0].late


def test_a_visitor_who_is_not_logged_in_goes_to_the_login(client, db):
    response = client.get("/console/service-levels/")

    assert response.status_code == 302
    assert "/accounts/login/" in response.url


def test_the_operation_page_says_when_it_is_late_and_when_it_is_at_risk(client, login, workspace, frozen):
    operation = submit_brief(workspace)
    login("viewer")

    frozen.move_to(START + timedelta(minutes=2), tick=False)
    assert "service level" not in client.get(f"/console/operations/{operation.pk}/").content.decode()
    frozen.move_to(START + timedelta(seconds=250), tick=False)
    assert (
        "At risk: 4 min since it arrived, of a service level of 5 min."
        in client.get(f"/console/operations/{operation.pk}/").content.decode()
    )
    frozen.move_to(START + timedelta(minutes=7), tick=False)
    assert (
        "Late: 7 min since it arrived, past its service level of 5 min."
        in client.get(f"/console/operations/{operation.pk}/").content.decode()
    )


def test_a_configured_actions_late_and_at_risk_work_is_listed_against_its_own_level(
    api, client, login, send_invoice_action, frozen
):
    """The demo's send-invoice, declared in its integrations file with 30 minutes, claimed by callers
    that have not reported yet."""

    def claim(request_id: str) -> dict:
        data = {"request_id": request_id, "version": 1, "customer_id": "C-1", "amount_cents": 100, "currency": "EUR"}
        return api.post("/api/v1/claims", {"action": "send-invoice", "data": data, "lease_seconds": 3600}).json()

    late = claim("INV-1")
    frozen.move_to(START + timedelta(minutes=10), tick=False)
    at_risk = claim("INV-2")
    frozen.move_to(START + timedelta(minutes=35), tick=False)
    login("viewer")

    response = client.get("/console/service-levels/")

    levels = {row["level"].action: row["level"] for row in response.context["levels"]}
    assert (levels["send-invoice"].level, levels["send-invoice"].at_risk, levels["send-invoice"].late) == (
        timedelta(minutes=30),
        1,
        1,
    )
    assert [operation.key for operation in response.context["operations"]] == [late["key"], at_risk["key"]]
    page = response.content.decode()
    assert "<strong>late</strong>: past its 30 min" in page
