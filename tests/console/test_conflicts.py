"""The conflicts inbox: open conflicts of every operation state, grouped by operation, masked as the
operation page masks them; decisions on many at once for those who may review, each audited; a
refused decision (no reason, nothing selected, another workspace, no role) changes nothing."""

import re

import pytest
from django.contrib.messages import get_messages

from ledger.core import accounts
from ledger.core.privacy import MASK
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, Conflict, Membership, Operation
from ledger.people import conflict_decisions
from opsconsole.console.conflicts import GROUPS_PER_PAGE, SHOWN_PER_GROUP

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


# --- the list -------------------------------------------------------------------------------------


def test_it_lists_the_open_conflicts_of_every_state_grouped_by_operation(client, login, race, operator_or_viewer, bob):
    login(operator_or_viewer)
    waiting, waiting_conflicts = race(3, request_id="R-1")
    done, done_conflicts = race(2, request_id="R-2")
    Operation.objects.filter(pk=done.pk).update(state="succeeded")
    conflict_decisions.dismiss_conflict(waiting_conflicts[0], user=bob, reason="decided before")

    page = client.get(INBOX)

    assert page.status_code == 200
    groups = page.context["groups"]
    assert [(g["operation"].pk, g["open"]) for g in groups] == [(done.pk, 2), (waiting.pk, 2)]
    html = text(page)
    assert f'<a href="/console/operations/{done.pk}/">{done.key}</a>' in html
    assert '<span class="badge state-succeeded">Succeeded</span>' in html
    assert '<span class="badge state-pending">Pending</span>' in html
    assert '<strong>note</strong>: <span class="recorded">first</span> → <span class="incoming">take 2</span>' in html
    assert f'id="conflict-{waiting_conflicts[0].pk}"' not in html  # decided: not in the inbox
    assert f'id="conflict-{waiting_conflicts[1].pk}"' in html
    # Each conflict's delivery (no delivery id was sent: its number) and source.
    assert f"#{done_conflicts[0].delivery_id} <small>api</small>" in html


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

    masked = f'<strong>secret</strong>: <span class="recorded">{MASK}</span> → <span class="incoming">{MASK}</span>'
    assert ("s3cr3t-two" in html) is shown
    assert (masked in html) is not shown
    assert '<span class="recorded">one</span> → <span class="incoming">two</span>' in html


def test_it_tells_a_viewer_who_can_decide_and_offers_no_decision(client, login, race):
    login("viewer")
    race(2)

    html = text(client.get(INBOX))

    assert "You may look, not decide: operators and admins of workspace demo decide conflicts." in html
    assert "Dismiss all" not in html
    assert "Apply this one" not in html
    assert 'type="checkbox"' not in html


def test_it_offers_apply_only_while_the_operation_has_not_run(client, login, race):
    login("operator")
    race(1, request_id="R-1")
    ran, _ = race(1, request_id="R-2")
    Operation.objects.filter(pk=ran.pk).update(state="succeeded", attempts=1)

    groups = {g["operation"].pk: g for g in client.get(INBOX).context["groups"]}

    assert [g["can_apply"] for g in groups.values()] == [False, True]
    assert text(client.get(INBOX)).count("Apply this one") == 1


def test_it_filters_by_workspace_and_action(client, login, race, noted_action, scripted_action):
    user = login("operator")
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    Membership.objects.create(user=user, workspace=other, role="operator")
    ours, _ = race(1)
    data = {"request_id": "B-1", "version": 1, "note": "one", "secret": "s"}
    for note in ("one", "two"):
        submit_event(workspace=other, source="api", raw={"action": noted_action.name, "data": data | {"note": note}})
    theirs = Operation.objects.get(workspace=other)

    def listed(params):
        return [g["operation"].pk for g in client.get(INBOX, params).context["groups"]]

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

    assert page.context["groups"] == []
    assert "No open conflict." in text(page)


def test_it_pages_groups_newest_operation_first(client, login, race):
    login("operator")
    operations = [race(1, request_id=f"R-{n}")[0] for n in range(GROUPS_PER_PAGE + 3)]

    first = client.get(INBOX)
    older = client.get(INBOX, {"older": first.context["older"]})

    newest_first = [op.pk for op in reversed(operations)]
    assert [g["operation"].pk for g in first.context["groups"]] == newest_first[:GROUPS_PER_PAGE]
    assert [g["operation"].pk for g in older.context["groups"]] == newest_first[GROUPS_PER_PAGE:]
    assert older.context["older"] is None
    assert "« Newest" in text(older)
    for cursor in ["not-a-cursor", "-1", str(2**64)]:
        assert client.get(INBOX, {"older": cursor}).context["first"], cursor


def test_it_shows_a_bounded_number_of_a_groups_conflicts_and_says_how_many_more(client, login, race):
    login("operator")
    race(SHOWN_PER_GROUP + 4)

    page = client.get(INBOX)

    [group] = page.context["groups"]
    assert (group["open"], len(group["conflicts"]), group["hidden"]) == (SHOWN_PER_GROUP + 4, SHOWN_PER_GROUP, 4)
    assert f"Dismiss all {SHOWN_PER_GROUP + 4} conflicts of this operation" in text(page)
    assert "And 4 more" in text(page)


def test_the_queue_links_its_open_conflicts_count_to_the_inbox(client, login, race):
    login("viewer")
    race(3)

    html = text(client.get("/console/"))

    assert '<a href="/console/conflicts/">Open conflicts: 3</a>' in html
    assert '<a href="/console/conflicts/">Conflicts</a>' in html  # the main navigation


# --- decisions ------------------------------------------------------------------------------------


def test_it_dismisses_all_of_an_operations_conflicts_with_one_reason(client, login, race):
    login("operator")
    operation, made = race(31)

    response = decide(
        client,
        f"/console/conflicts/operations/{operation.pk}/dismiss/",
        {"reason": "a sender's retry storm", "seen": seen(client)},
        query="workspace=1",
    )

    assert messages_of(response) == [
        ("success", f"Dismissed 31 conflicts of {operation.key}; each decision is in the audit trail.")
    ]
    assert set(Conflict.objects.values_list("status", "decided_by")) == {("dismissed", "operator")}
    assert AuditEvent.objects.filter(kind="conflict_dismissed", actor="operator").count() == 31
    assert client.get(INBOX).context["groups"] == []


def test_it_leaves_a_conflict_that_arrived_after_the_page_was_shown(client, login, race, noted):
    login("operator")
    operation, made = race(2)
    shown = seen(client)
    late = noted(note="take 3").conflict

    decide(client, f"/console/conflicts/operations/{operation.pk}/dismiss/", {"reason": "r", "seen": shown})

    assert Conflict.objects.get(pk=late.pk).status == "open"
    assert Conflict.objects.filter(status="dismissed").count() == 2


def test_pressing_dismiss_all_twice_changes_nothing_the_second_time(client, login, race):
    login("operator")
    operation, _ = race(3)
    form = {"reason": "stale", "seen": seen(client)}
    client.get(decide(client, f"/console/conflicts/operations/{operation.pk}/dismiss/", form).url)
    before = snapshot()

    response = decide(client, f"/console/conflicts/operations/{operation.pk}/dismiss/", form)

    assert messages_of(response) == [
        ("warning", f"No conflict of {operation.key} is open any more; nothing was changed.")
    ]
    assert snapshot() == before


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


def test_it_dismisses_a_selection_across_operations(client, login, race):
    login("operator")
    first, first_conflicts = race(3, request_id="R-1")
    second, _ = race(2, request_id="R-2")
    untouched, _ = race(2, request_id="R-3")

    response = decide(
        client,
        "/console/conflicts/dismiss/",
        {
            "conflict": [first_conflicts[0].pk, first_conflicts[2].pk],
            "operation": [second.pk],
            "reason": "duplicates from the import",
            "seen": seen(client),
        },
    )

    [(level, message)] = messages_of(response)
    assert (level, message) == (
        "success",
        f"Dismissed 4 conflicts of {first.key}, {second.key}; each decision is in the audit trail.",
    )
    open_by_operation = sorted(Conflict.objects.filter(status="open").values_list("operation_id", flat=True))
    assert open_by_operation == [first.pk, untouched.pk, untouched.pk]


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
            "dismiss_all": (f"/console/conflicts/operations/{operation.pk}/dismiss/", {"reason": "r", "seen": shown}),
            "apply_one": (f"/console/conflicts/{made[0].pk}/apply-one/", {"reason": "r", "seen": shown}),
            "selection": ("/console/conflicts/dismiss/", {"conflict": [made[0].pk], "reason": "r", "seen": shown}),
        }

    return make


DECISIONS = ["dismiss_all", "apply_one", "selection"]


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

    assert messages_of(response) == [("error", "Select at least one conflict or operation; nothing was changed.")]
    assert snapshot() == before


@pytest.mark.parametrize("selected", ["conflict", "operation", "junk", "huge"])
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
        "operation": {"conflict": [mine[0].pk], "operation": [theirs.operation_id]},
        "junk": {"conflict": [mine[0].pk, "1; drop"]},
        "huge": {"operation": [str(2**64)]},
    }[selected]
    before = snapshot()

    response = client.post("/console/conflicts/dismiss/", chosen | {"reason": "r", "seen": 10**6})

    assert response.status_code == 404
    assert snapshot() == before


def test_it_answers_404_for_another_workspaces_operation_or_conflict(client, login, noted_action):
    login("operator")
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    data = {"request_id": "B-1", "version": 1, "note": "one", "secret": "s"}
    submit_event(workspace=other, source="api", raw={"action": noted_action.name, "data": data})
    theirs = submit_event(
        workspace=other, source="api", raw={"action": noted_action.name, "data": data | {"note": "two"}}
    ).conflict
    before = snapshot()

    form = {"reason": "r", "seen": theirs.pk}
    assert client.post(f"/console/conflicts/operations/{theirs.operation_id}/dismiss/", form).status_code == 404
    assert client.post(f"/console/conflicts/{theirs.pk}/apply-one/", form).status_code == 404
    assert snapshot() == before


@pytest.mark.parametrize(
    "url",
    ["/console/conflicts/dismiss/", "/console/conflicts/operations/1/dismiss/", "/console/conflicts/1/apply-one/"],
)
def test_decisions_take_only_a_post(client, login, url):
    login("operator")
    assert client.get(url).status_code == 405


def test_the_inbox_needs_a_login_and_a_workspace(client, login):
    assert client.get(INBOX).status_code == 302
    login("nobody")
    assert client.get(INBOX).status_code == 403
