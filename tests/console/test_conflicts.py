"""The conflicts inbox as a work list: held conflicts (their operation has not run) first, each with
its decision; dismiss-only ones grouped by action with "dismiss all N matching"; decided ones on
their own tab; counts at the top; the differences labelled and masked as the operation page shows
them. Decisions on many at once, each audited; a refused decision (no reason, nothing selected,
another workspace, no role, a list that changed) changes nothing."""

import re

import pytest
from django.contrib.messages import get_messages

from ledger.core import accounts
from ledger.core.privacy import MASK
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, Conflict, Membership, Operation
from ledger.people import conflict_decisions
from opsconsole.console.conflicts import PAGE_SIZE, ROWS_PER_ACTION
from tests.console.conftest import NotedData

INBOX = "/console/conflicts/"


def messages_of(response) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


@pytest.fixture
def race(noted):
    """``race(n)``: the same key sent with n + 1 different notes: one operation, n open conflicts."""

    def make(count: int, request_id: str = "R-9"):
        operation = noted(note="first", request_id=request_id).operation
        made = [noted(note=f"take {n}", request_id=request_id).conflict for n in range(1, count + 1)]
        assert all(made)
        return operation, made

    return make


def snapshot():
    return (
        list(Operation.objects.order_by("pk").values_list("pk", "state", "payload")),
        list(Conflict.objects.order_by("pk").values_list("pk", "status")),
        AuditEvent.objects.count(),
    )


def decide(client, url, data, *, query="") -> object:
    response = client.post(url, data | {"query": query})
    assert response.status_code == 302
    assert response.url == INBOX + (f"?{query}" if query else "")
    return response


def seen(client) -> int:
    return client.get(INBOX).context["seen"]


@pytest.fixture
def ran(race):
    """``ran(n)``: a race whose operation ran (test setup only): n dismiss-only conflicts."""

    def make(count: int, request_id: str = "R-9"):
        operation, made = race(count, request_id=request_id)
        Operation.objects.filter(pk=operation.pk).update(state="succeeded", attempts=1)
        return operation, made

    return make


def held_rows(response) -> list:
    return [row["conflict"].pk for row in response.context["held"] or []]


def dismissable_rows(response) -> dict[str, list[int]]:
    return {group["action"]: [row["conflict"].pk for row in group["rows"]] for group in response.context["dismissable"]}


def counts(response) -> dict:
    return {tab["state"]: tab["count"] for tab in response.context["tabs"]}


def matching_form(response, action: str) -> dict:
    """What the "Dismiss all N matching" form of ``action``'s group sends."""
    [group] = [g for g in response.context["dismissable"] if g["action"] == action]
    matching = group["matching"]
    return {
        "matching": matching["query"],
        "matching_count": matching["count"],
        "matching_digest": matching["digest"],
    }


REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4350, "currency": "EUR"}


@pytest.fixture
def held_refund(workspace):
    """A refund awaiting approval sent again with another amount: held by its conflict."""
    submit_event(workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND})
    return submit_event(
        workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND | {"amount_cents": 4351}}
    ).conflict


# --- the list -------------------------------------------------------------------------------------


def test_it_lists_held_conflicts_first_and_the_dismiss_only_ones_by_action(
    client, login, race, ran, operator_or_viewer, bob
):
    login(operator_or_viewer)
    waiting, waiting_conflicts = race(3, request_id="R-1")
    done, done_conflicts = ran(2, request_id="R-2")
    conflict_decisions.dismiss_conflict(waiting_conflicts[0], user=bob, reason="decided before")

    page = client.get(INBOX)

    assert page.status_code == 200
    assert held_rows(page) == [waiting_conflicts[2].pk, waiting_conflicts[1].pk]
    [action] = dismissable_rows(page)
    assert dismissable_rows(page)[action] == [done_conflicts[1].pk, done_conflicts[0].pk]
    assert counts(page) == {"": 4, "held": 2, "dismiss_only": 2, "decided": 1}
    html = text(page)
    assert html.index('id="held-title"') < html.index('id="dismiss-only-title"')
    assert f'<a href="/console/operations/{done.pk}/">{done.key}</a>' in html
    assert '<span class="badge state-succeeded">Succeeded</span> <small>after 1 attempt</small>' in html
    assert '<span class="badge state-pending">Pending</span>' in html
    # The differences first in each row, the field labelled as people read it.
    assert '<strong>Note</strong>: <span class="recorded">first</span> → <span class="incoming">take 2</span>' in html
    assert f'id="conflict-{waiting_conflicts[0].pk}"' not in html  # decided: on its own tab


@pytest.fixture(params=["operator", "viewer"])
def operator_or_viewer(request):
    return request.param


@pytest.mark.parametrize(
    ("role", "shown"), [("viewer", False), ("operator", False), ("approver", True), ("admin", True)]
)
def test_it_masks_sensitive_differences_for_people_without_view_sensitive(client, login, noted, role, shown):
    login(role)
    noted(note="one", secret="s3cr3t-one")
    noted(note="two", secret="s3cr3t-two")

    html = text(client.get(INBOX))

    masked = f'<strong>Secret</strong>: <span class="recorded">{MASK}</span> → <span class="incoming">{MASK}</span>'
    assert ("s3cr3t-two" in html) is shown
    assert (masked in html) is not shown
    assert '<span class="recorded">one</span> → <span class="incoming">two</span>' in html


def test_an_approver_reads_a_refunds_amounts_as_money_and_may_apply_one(client, login, held_refund):
    login("approver")

    html = text(client.get(INBOX))

    assert (
        '<strong>Amount</strong>: <span class="recorded">43.50 EUR</span> → <span class="incoming">43.51 EUR</span>'
        in html
    )
    assert "Apply incoming and release</button>" in html
    assert "Dismiss and release</button>" in html
    assert "Only approvers and admins see" not in html


def test_an_operator_is_told_who_may_apply_a_side_of_a_refund_and_may_assign_it(client, login, held_refund, person):
    login("operator")
    carol, dave = person("carol", "approver"), person("dave", "admin")
    person("erin", "operator")

    response = client.get(INBOX)

    html = text(response)
    assert (
        f'<strong>Amount</strong>: <span class="recorded">{MASK}</span> → <span class="incoming">{MASK}</span>' in html
    )
    assert (
        "Only approvers and admins see the Amount; assign it to one of: carol, dave. Or dismiss it: "
        "the recorded payload stays."
    ) in html
    assert "Apply incoming" not in html
    assert "Dismiss and release</button>" in html
    assert f'<option value="{carol.pk}">carol</option><option value="{dave.pk}">dave</option>' in html
    assert f'action="/console/operations/{held_refund.operation_id}/assign/"' in html


@pytest.mark.parametrize("role", ["operator", "approver"])
def test_the_operation_page_offers_apply_only_to_who_sees_the_amounts(client, login, held_refund, role):
    login(role)

    html = text(client.get(f"/console/operations/{held_refund.operation_id}/"))

    assert ("Apply incoming payload</button>" in html) is (role == "approver")
    assert ">Dismiss</button>" in html
    assert ("which operator may not see: only approvers and admins of workspace demo" in html) is (role == "operator")


def test_a_viewer_is_told_who_decides_and_offered_no_decision(client, login, race, ran, held_refund):
    login("viewer")
    race(2)
    ran(2, request_id="R-2")

    html = text(client.get(INBOX))

    assert "You may look, not decide: operators and admins of workspace demo decide conflicts." in html
    assert (
        "You may look, not decide: operators and admins of workspace demo decide conflicts, and approvers and "
        "admins those in the Amount."
    ) in html
    for offered in ("Dismiss all", "Apply incoming", "Dismiss and release", 'type="checkbox"', "Assign to"):
        assert offered not in html, offered


def test_it_offers_apply_only_while_the_operation_has_not_run(client, login, race, ran):
    login("operator")
    race(1, request_id="R-1")
    ran(1, request_id="R-2")

    response = client.get(INBOX)

    assert [row["can_apply"] for row in response.context["held"]] == [True]
    assert [row["can_apply"] for g in response.context["dismissable"] for row in g["rows"]] == [False]
    assert text(response).count("Apply incoming") == 1


@pytest.mark.parametrize("state", ["held", "dismiss_only", "decided"])
def test_it_filters_by_state(client, login, race, ran, bob, state):
    login("operator")
    _, waiting = race(2, request_id="R-1")
    _, done = ran(1, request_id="R-2")
    conflict_decisions.dismiss_conflict(waiting[0], user=bob, reason="stale")

    response = client.get(INBOX, {"state": state})

    shown = [row["conflict"].pk for row in response.context["held"] or []]
    shown += [row["conflict"].pk for g in response.context["dismissable"] or [] for row in g["rows"]]
    shown += [row["conflict"].pk for row in response.context["decided"] or []]
    assert shown == {"held": [waiting[1].pk], "dismiss_only": [done[0].pk], "decided": [waiting[0].pk]}[state]
    assert [tab["state"] for tab in response.context["tabs"] if tab["current"]] == [state]
    if state == "decided":
        assert "Dismissed</span> <small>by bob</small>" in text(response)


def test_it_filters_by_workspace_and_action(client, login, race, noted_action, scripted_action):
    user = login("operator")
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    Membership.objects.create(user=user, workspace=other, role="operator")
    _, [ours] = race(1)
    data = {"request_id": "B-1", "version": 1, "note": "one", "secret": "s"}
    for note in ("one", "two"):
        submit_event(workspace=other, source="api", raw={"action": noted_action.name, "data": data | {"note": note}})
    theirs = Conflict.objects.get(operation__workspace=other)

    def listed(params):
        return held_rows(client.get(INBOX, params))

    assert listed({}) == [theirs.pk, ours.pk]
    assert listed({"workspace": other.pk}) == [theirs.pk]
    assert listed({"action": noted_action.name}) == [theirs.pk, ours.pk]
    assert listed({"action": scripted_action().name}) == []


def test_it_never_shows_another_workspaces_conflicts(client, login, noted_action):
    login("admin")
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    data = {"request_id": "B-1", "version": 1, "note": "one", "secret": "s"}
    for note in ("one", "two"):
        submit_event(workspace=other, source="api", raw={"action": noted_action.name, "data": data | {"note": note}})

    page = client.get(INBOX)

    assert (page.context["held"], page.context["dismissable"]) == ([], [])
    assert counts(page) == {"": 0, "held": 0, "dismiss_only": 0, "decided": 0}
    assert "No conflict to dismiss." in text(page)
    assert "No held conflict." in text(client.get(INBOX, {"state": "held"}))


def test_it_shows_a_few_of_each_actions_dismiss_only_conflicts_and_links_to_all(client, login, ran, noted_action):
    login("operator")
    _, made = ran(ROWS_PER_ACTION + 4)

    page = client.get(INBOX)

    [group] = page.context["dismissable"]
    assert (group["count"], len(group["rows"])) == (ROWS_PER_ACTION + 4, ROWS_PER_ACTION)
    assert f"Dismiss all {ROWS_PER_ACTION + 4} matching</button>" in text(page)
    assert f"See all {ROWS_PER_ACTION + 4} of {noted_action.name}</a>" in text(page)


def test_one_actions_dismiss_only_conflicts_are_paged_newest_first(client, login, ran, noted_action):
    login("operator")
    _, made = ran(PAGE_SIZE + 3)
    params = {"state": "dismiss_only", "action": noted_action.name}

    first = client.get(INBOX, params)
    older = client.get(INBOX, params | {"older": first.context["older"]})

    newest_first = [c.pk for c in reversed(made)]
    assert dismissable_rows(first)[noted_action.name] == newest_first[:PAGE_SIZE]
    assert dismissable_rows(older)[noted_action.name] == newest_first[PAGE_SIZE:]
    assert older.context["older"] is None
    assert "« Newest" in text(older)
    assert "See all" not in text(first)
    for cursor in ["not-a-cursor", "-1", str(2**64)]:
        assert client.get(INBOX, params | {"older": cursor}).context["first"], cursor


def test_held_conflicts_are_paged_newest_first(client, login, race):
    login("operator")
    _, made = race(PAGE_SIZE + 2)
    newest_first = [c.pk for c in reversed(made)]

    front = client.get(INBOX)
    first = client.get(INBOX, {"state": "held"})
    older = client.get(INBOX, {"state": "held", "older": first.context["older"]})

    assert held_rows(front) == newest_first[:PAGE_SIZE]
    assert f"See all {PAGE_SIZE + 2} held</a>" in text(front)
    assert held_rows(first) == newest_first[:PAGE_SIZE]
    assert held_rows(older) == newest_first[PAGE_SIZE:]
    assert older.context["older"] is None
    assert counts(older) == {"": PAGE_SIZE + 2, "held": PAGE_SIZE + 2, "dismiss_only": 0, "decided": 0}


def test_each_actions_dismiss_only_conflicts_are_a_group_the_biggest_first(
    client, login, race, ran, noted_action, scripted_action, workspace
):
    """Each group counts its action's conflicts, shows its newest and dismisses all of its own
    (and no other action's) at once; a held conflict is in none of them."""
    login("operator")
    _, small = ran(2, request_id="R-1")
    race(1, request_id="R-2")  # held
    other = scripted_action(
        schema=NotedData, fingerprint_fields=("request_id", "version", "note", "secret"), sensitive_fields=("secret",)
    )
    data = {"request_id": "B-1", "version": 1, "note": "one", "secret": "s"}
    for note in ("one", "two", "three", "four"):
        submit_event(workspace=workspace, source="api", raw={"action": other.name, "data": data | {"note": note}})
    Operation.objects.filter(action=other.name).update(state="succeeded", attempts=1)
    big = Conflict.objects.filter(operation__action=other.name).order_by("-pk")

    page = client.get(INBOX)

    assert [(group["action"], group["count"]) for group in page.context["dismissable"]] == [
        (other.name, 3),
        (noted_action.name, 2),
    ]
    assert dismissable_rows(page) == {
        other.name: [c.pk for c in big],
        noted_action.name: [c.pk for c in reversed(small)],
    }
    assert counts(page) == {"": 6, "held": 1, "dismiss_only": 5, "decided": 0}
    response = client.post("/console/conflicts/dismiss-matching/", matching_form(page, other.name) | {"reason": "r"})
    assert messages_of(response)[0][0] == "success"
    assert set(big.values_list("status", flat=True)) == {"dismissed"}
    assert set(Conflict.objects.exclude(operation__action=other.name).values_list("status", flat=True)) == {"open"}


def test_the_queue_links_its_open_conflicts_count_to_the_inbox(client, login, race):
    login("viewer")
    race(3)

    html = text(client.get("/console/"))

    assert '<a href="/console/conflicts/">Open conflicts: 3</a>' in html
    assert '<a href="/console/conflicts/">Conflicts</a>' in html  # the main navigation


# --- dismiss all N matching ---------------------------------------------------------------------


def test_it_dismisses_all_matching_across_pages_with_one_reason(client, login, ran, noted_action):
    login("operator")
    _, made = ran(PAGE_SIZE + 5)
    form = matching_form(client.get(INBOX), noted_action.name)

    response = client.post("/console/conflicts/dismiss-matching/", form | {"reason": "a sender's retry storm"})

    assert response.status_code == 302
    assert response.url == INBOX  # back to the page it was sent from
    [(level, message)] = messages_of(response)
    assert level == "success"
    assert message.startswith(f"Dismissed {PAGE_SIZE + 5} conflicts of ")
    assert set(Conflict.objects.values_list("status", "decided_by")) == {("dismissed", "operator")}
    assert AuditEvent.objects.filter(kind="conflict_dismissed", actor="operator").count() == PAGE_SIZE + 5


def test_pressing_dismiss_all_matching_twice_changes_nothing_the_second_time(client, login, ran, noted_action):
    login("operator")
    ran(3)
    form = matching_form(client.get(INBOX), noted_action.name) | {"reason": "stale"}
    client.get(client.post("/console/conflicts/dismiss-matching/", form).url)  # its report read
    before = snapshot()

    response = client.post("/console/conflicts/dismiss-matching/", form)

    assert messages_of(response) == [("warning", "None of these 3 conflicts is open any more; nothing was changed.")]
    assert snapshot() == before


def test_it_refuses_dismissing_all_matching_when_the_list_changed(client, login, ran, noted, noted_action):
    login("operator")
    operation, _ = ran(3)
    form = matching_form(client.get(INBOX), noted_action.name) | {"reason": "stale"}
    noted(note="take 4")  # one more since the page was read
    before = snapshot()

    response = client.post("/console/conflicts/dismiss-matching/", form)

    assert messages_of(response) == [
        (
            "error",
            "The list changed since you loaded it: you saw 3 conflicts, it now holds 4. Nothing was changed; "
            "look at the list again before dismissing all of it.",
        )
    ]
    assert snapshot() == before


def test_dismissing_all_matching_needs_a_reason(client, login, ran, noted_action):
    login("operator")
    ran(2)
    form = matching_form(client.get(INBOX), noted_action.name)
    before = snapshot()

    response = client.post("/console/conflicts/dismiss-matching/", form | {"reason": " "})

    assert messages_of(response) == [("error", "Reason is required; nothing was changed.")]
    assert snapshot() == before


def test_dismissing_all_matching_never_reaches_another_workspace(client, login, ran, noted_action):
    """The ids are read again from the query, within the person's workspaces: a query naming
    another workspace is refused, and nothing of it is written."""
    login("operator")
    ran(2)
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    data = {"request_id": "B-1", "version": 1, "note": "one", "secret": "s"}
    for note in ("one", "two"):
        submit_event(workspace=other, source="api", raw={"action": noted_action.name, "data": data | {"note": note}})
    Operation.objects.filter(workspace=other).update(state="succeeded", attempts=1)
    form = matching_form(client.get(INBOX), noted_action.name)
    crafted = form | {"matching": f"state=dismiss_only&workspace={other.pk}", "reason": "theirs"}
    before = snapshot()

    assert client.post("/console/conflicts/dismiss-matching/", crafted).status_code == 404
    assert snapshot() == before
    client.post("/console/conflicts/dismiss-matching/", form | {"reason": "ours"})
    assert Conflict.objects.get(operation__workspace=other).status == "open"


def test_dismissing_all_matching_is_for_dismiss_only_conflicts(client, login, race, noted_action):
    login("operator")
    race(2)
    before = snapshot()

    response = client.post(
        "/console/conflicts/dismiss-matching/",
        {"matching": "state=held", "matching_count": 2, "matching_digest": "0" * 64, "reason": "no"},
    )

    assert response.status_code == 404
    assert snapshot() == before


def test_dismiss_all_matching_takes_only_the_conflicts_the_person_may_decide(client, login, ran, noted_action):
    """An operator here and a viewer elsewhere sees both workspaces' conflicts in one group: "dismiss
    all N matching" counts and dismisses only those they may decide, never refused for the others."""
    operator = login("operator")
    ran(2)
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    Membership.objects.create(user=operator, workspace=other, role="viewer")
    data = {"request_id": "B-1", "version": 1, "note": "one", "secret": "s"}
    for note in ("one", "two"):
        submit_event(workspace=other, source="api", raw={"action": noted_action.name, "data": data | {"note": note}})
    Operation.objects.filter(workspace=other).update(state="succeeded", attempts=1)
    page = client.get(INBOX)
    [group] = page.context["dismissable"]
    assert group["count"] == 3  # listed: 2 here, 1 there
    form = matching_form(page, noted_action.name)
    assert form["matching_count"] == 2

    response = client.post("/console/conflicts/dismiss-matching/", form | {"reason": "a retry storm"})

    [(level, message)] = messages_of(response)
    assert level == "success", message
    assert Conflict.objects.filter(operation__workspace=other).get().status == "open"
    assert set(Conflict.objects.exclude(operation__workspace=other).values_list("status", flat=True)) == {"dismissed"}


def test_a_viewer_may_not_dismiss_all_matching(client, login, ran, noted_action, django_user_model):
    operator = login("operator")
    ran(2)
    form = matching_form(client.get(INBOX), noted_action.name)
    Membership.objects.filter(user=operator).update(role="viewer")
    before = snapshot()

    response = client.post("/console/conflicts/dismiss-matching/", form | {"reason": "no"})

    assert messages_of(response) == [
        ("error", "operator may not replay, resolve, cancel or decide conflicts in workspace demo.")
    ]
    assert snapshot() == before


# --- one at a time, and a selection ------------------------------------------------------------------


def test_it_applies_one_and_dismisses_the_rest(client, login, race):
    login("operator")
    operation, made = race(4)

    response = decide(
        client, f"/console/conflicts/{made[1].pk}/apply-one/", {"reason": "take 2 is the one", "seen": seen(client)}
    )

    assert messages_of(response) == [
        (
            "success",
            f"Applied the incoming payload of conflict {made[1].pk} to {operation.key}. Dismissed 3 conflicts "
            f"of {operation.key}; each decision is in the audit trail.",
        )
    ]
    operation.refresh_from_db()
    assert operation.payload["note"] == "take 2"
    assert sorted(Conflict.objects.values_list("status", flat=True)) == ["applied"] + ["dismissed"] * 3
    assert AuditEvent.objects.get(kind="conflict_applied").message == f"conflict {made[1].pk} (note): take 2 is the one"


def test_it_refuses_an_operator_a_crafted_apply_of_a_refunds_amount(client, login, held_refund):
    login("operator")
    before = snapshot()

    response = decide(
        client, f"/console/conflicts/{held_refund.pk}/apply-one/", {"reason": "the new one", "seen": held_refund.pk}
    )

    [(level, message)] = messages_of(response)
    assert level == "error"
    assert message.startswith(
        f"Conflict {held_refund.pk} on {held_refund.operation.key} differs in Amount, which operator may not see"
    )
    assert snapshot() == before


def test_an_approver_applies_a_refunds_amount_from_the_inbox(client, login, held_refund):
    login("approver")

    decide(
        client,
        f"/console/conflicts/{held_refund.pk}/apply-one/",
        {"reason": "the corrected amount", "seen": held_refund.pk},
    )

    assert Operation.objects.get().payload["amount_cents"] == 4351
    assert Conflict.objects.get().status == "applied"


def test_an_operator_assigns_a_refund_to_an_approver_from_the_inbox(client, login, held_refund, person):
    login("operator")
    carol = person("carol", "approver")

    response = client.post(f"/console/operations/{held_refund.operation_id}/assign/", {"to": carol.pk, "next": INBOX})

    assert response.url == INBOX
    assert messages_of(response) == [("success", f"Assigned {held_refund.operation.key} to carol.")]
    assert Operation.objects.get().assigned_to == carol
    assert "Assigned to <strong>carol</strong>." in text(client.get(INBOX))


@pytest.mark.parametrize("to", ["", "junk", "viewer"])
def test_it_refuses_assigning_to_nobody_or_someone_who_may_not_act(client, login, held_refund, person, to):
    login("operator")
    watcher = person("watcher", "viewer")
    before = snapshot()

    response = client.post(
        f"/console/operations/{held_refund.operation_id}/assign/",
        {"to": watcher.pk if to == "viewer" else to, "next": INBOX},
    )

    [(level, _)] = messages_of(response)
    assert level == "error"
    assert snapshot() == before
    assert Operation.objects.get().assigned_to is None


def test_assigning_names_nobody_outside_the_operations_workspace(client, login, held_refund, person):
    """A user id of another tenant is refused as if it were no one: the refusal never spells their name."""
    login("operator")
    accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    stranger = person("stranger-in-other", "approver", workspaces=("other",))
    before = snapshot()

    response = client.post(
        f"/console/operations/{held_refund.operation_id}/assign/", {"to": stranger.pk, "next": INBOX}
    )

    assert messages_of(response) == [("error", "Choose whom to assign it to; nothing was changed.")]
    assert "stranger-in-other" not in text(client.get(INBOX))
    assert snapshot() == before


def test_it_reports_a_refused_apply_and_dismisses_nothing(client, login, race):
    login("operator")
    operation, made = race(2)
    shown = seen(client)
    process_due_operations(worker="w1")
    before = snapshot()

    response = decide(client, f"/console/conflicts/{made[0].pk}/apply-one/", {"reason": "late", "seen": shown})

    [(level, message)] = messages_of(response)
    assert level == "error"
    assert "a conflict can only be applied before the operation runs" in message
    assert snapshot() == before


def test_it_dismisses_a_selection_across_operations(client, login, ran):
    login("operator")
    first, first_conflicts = ran(3, request_id="R-1")
    second, second_conflicts = ran(2, request_id="R-2")

    response = decide(
        client,
        "/console/conflicts/dismiss/",
        {
            "conflict": [first_conflicts[0].pk, first_conflicts[2].pk, second_conflicts[1].pk],
            "reason": "duplicates from the import",
            "seen": seen(client),
        },
    )

    [(level, message)] = messages_of(response)
    assert (level, message) == (
        "success",
        f"Dismissed 3 conflicts of {first.key}, {second.key}; each decision is in the audit trail.",
    )
    still_open = sorted(Conflict.objects.filter(status="open").values_list("pk", flat=True))
    assert still_open == [first_conflicts[1].pk, second_conflicts[0].pk]


def test_it_reports_the_selected_conflicts_someone_else_decided_meanwhile(client, login, race, bob):
    login("operator")
    _, made = race(3)
    shown = seen(client)
    conflict_decisions.dismiss_conflict(made[0], user=bob, reason="mine")

    response = decide(
        client, "/console/conflicts/dismiss/", {"conflict": [c.pk for c in made], "reason": "all", "seen": shown}
    )

    assert messages_of(response)[1] == (
        "warning",
        f"1 conflict was already decided and left as it was: {made[0].pk} (dismissed by bob).",
    )
    assert Conflict.objects.get(pk=made[0].pk).decided_by == "bob"
    assert AuditEvent.objects.filter(kind="conflict_dismissed").count() == 3


@pytest.fixture
def forms_of(race, client):
    """Each decision's URL with a valid form."""

    def make():
        operation, made = race(2)
        shown = seen(client)
        return {
            "apply_one": (f"/console/conflicts/{made[0].pk}/apply-one/", {"reason": "r", "seen": shown}),
            "selection": ("/console/conflicts/dismiss/", {"conflict": [made[0].pk], "reason": "r", "seen": shown}),
        }

    return make


DECISIONS = ["apply_one", "selection"]


@pytest.mark.parametrize("name", DECISIONS)
def test_it_refuses_a_decision_without_a_reason(client, login, forms_of, name):
    login("operator")
    url, form = forms_of()[name]
    before = snapshot()

    response = decide(client, url, form | {"reason": ""})

    assert messages_of(response) == [("error", "Reason is required; nothing was changed.")]
    assert snapshot() == before


@pytest.mark.parametrize("role", ["viewer", "approver"])
@pytest.mark.parametrize("name", DECISIONS)
def test_it_refuses_a_decision_without_the_review_role(client, login, forms_of, name, role):
    """An approver decides conflicts in sensitive fields only: these differ in a note."""
    login(role)
    url, form = forms_of()[name]
    before = snapshot()

    assert client.post(url, form).status_code == 403
    assert snapshot() == before


def test_it_refuses_an_empty_selection(client, login, race):
    login("operator")
    race(2)
    before = snapshot()

    response = decide(client, "/console/conflicts/dismiss/", {"reason": "r", "seen": seen(client)})

    assert messages_of(response) == [("error", "Select at least one conflict; nothing was changed.")]
    assert snapshot() == before


@pytest.mark.parametrize("selected", ["conflict", "junk", "huge"])
def test_it_answers_404_for_a_selection_reaching_into_another_workspace(client, login, race, noted_action, selected):
    login("operator")
    _, mine = race(2)
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    data = {"request_id": "B-1", "version": 1, "note": "one", "secret": "s"}
    submit_event(workspace=other, source="api", raw={"action": noted_action.name, "data": data})
    theirs = submit_event(
        workspace=other, source="api", raw={"action": noted_action.name, "data": data | {"note": "two"}}
    ).conflict
    chosen = {
        "conflict": {"conflict": [mine[0].pk, theirs.pk]},
        "junk": {"conflict": [mine[0].pk, "1; drop"]},
        "huge": {"conflict": [str(2**64)]},
    }[selected]
    before = snapshot()

    response = client.post("/console/conflicts/dismiss/", chosen | {"reason": "r", "seen": 10**6})

    assert response.status_code == 404
    assert snapshot() == before


def test_it_answers_404_for_another_workspaces_conflict(client, login, noted_action):
    login("operator")
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    data = {"request_id": "B-1", "version": 1, "note": "one", "secret": "s"}
    submit_event(workspace=other, source="api", raw={"action": noted_action.name, "data": data})
    theirs = submit_event(
        workspace=other, source="api", raw={"action": noted_action.name, "data": data | {"note": "two"}}
    ).conflict
    before = snapshot()

    form = {"reason": "r", "seen": theirs.pk}
    assert client.post(f"/console/conflicts/{theirs.pk}/apply-one/", form).status_code == 404
    assert client.post(f"/console/operations/{theirs.operation_id}/assign/", {"to": 1}).status_code == 404
    assert snapshot() == before


@pytest.mark.parametrize(
    "url",
    ["/console/conflicts/dismiss/", "/console/conflicts/dismiss-matching/", "/console/conflicts/1/apply-one/"],
)
def test_decisions_take_only_a_post(client, login, url):
    login("operator")
    assert client.get(url).status_code == 405


def test_the_inbox_needs_a_login_and_a_workspace(client, login):
    assert client.get(INBOX).status_code == 302
    login("nobody")
    assert client.get(INBOX).status_code == 403
