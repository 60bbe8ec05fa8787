"""The queue as a work list: states as people say them, and a summary of each
operation from its action's template, never a sensitive value."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr

from ledger.actions import base, get_action, summaries
from ledger.intake.submit import submit_event
from ledger.integrations import saving
from ledger.models import AuditEvent, BulkAction, Destination, HttpAction, Operation, Workspace
from ledger.states import LABELS, State
from tests.ledger.conftest import submit, submit_brief

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def rows(response) -> list[str]:
    """Each row of the list as its text, tags and runs of spaces removed."""
    html = response.content.decode()
    body = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [" ".join(re.sub(r"<[^>]+>", " ", row).split()) for row in body.split("</tr>")[:-1]]


def to_review(operation: Operation, **fields) -> Operation:
    Operation.objects.filter(pk=operation.pk).update(state="needs_review", **fields)
    return operation


def test_every_state_has_a_label_people_read():
    assert set(LABELS) == set(State)
    assert LABELS[State.NEEDS_REVIEW] == "Needs review"


def test_the_queue_shows_each_operation_summary_and_its_state_in_words(client, login, workspace):
    to_review(submit_brief(workspace))
    login("viewer")

    [row] = rows(client.get("/console/"))

    assert row.startswith("R-42 v3 · Review renewal options demo:R-42:v3:prepare-brief Needs review prepare-brief")
    assert "needs_review" not in row


def test_the_state_tabs_and_the_state_filter_read_as_words(client, login, workspace):
    to_review(submit_brief(workspace))
    login("viewer")

    html = client.get("/console/").content.decode()

    assert re.search(r'data-state="needs_review"[^>]*>Needs review <span class="tab-count">1</span>', html)
    assert '<option value="pending_approval">Awaiting approval</option>' in html


def test_a_summary_never_shows_a_sensitive_value(client, login, workspace, approver):
    """issue-refund's customer and amount are sensitive: its summary names neither, even for an
    approver who may see them."""
    refund = submit_event(workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND}).operation
    client.force_login(approver)

    [row] = rows(client.get("/console/", {"state": "pending_approval"}))

    assert row.startswith("R-7 v1 · refund in EUR")
    assert "C-1001" not in row
    assert "4500" not in row
    assert "45.00" not in row
    assert refund.key in row


def test_an_action_without_a_summary_is_summarised_by_its_identity(client, login, make_operation):
    make_operation("needs_review", request_id="INV-1")
    login("viewer")

    [row] = rows(client.get("/console/"))

    assert row.startswith("INV-1 v1 ")


def test_a_summary_leaves_out_what_retention_removed():
    assert (
        summaries.render("{request_id} v{version} · {title}", {"request_id": "R-1", "version": 2}, sensitive=())
        == "R-1 v2"
    )
    assert summaries.render("{title}", None, sensitive=()) == ""


def test_render_leaves_out_a_sensitive_field_however_it_is_asked():
    assert (
        summaries.render("{request_id} {secret}", {"request_id": "R-1", "secret": "s3"}, sensitive=("secret",)) == "R-1"
    )


def test_a_long_summary_is_cut_to_one_cell():
    text = summaries.render("{title}", {"title": "x" * 500}, sensitive=())
    assert len(text) == summaries.MAX_LENGTH
    assert text.endswith("…")


class NotedData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: StrictStr
    version: StrictInt
    secret: StrictStr


@pytest.mark.parametrize(
    ("template", "refusal"),
    [
        ("{request_id} {secret}", "{secret}, a sensitive field"),
        ("{request_id} {nothing}", "{nothing}, which is not a field"),
        ("{request_id!r}", "takes no format or conversion"),
        ("{request_id", "is not a template"),
    ],
)
def test_registering_an_action_whose_summary_could_leak_or_fail_is_refused(template, refusal):
    cls = type(
        "Leaky",
        (base.ActionDefinition,),
        {
            "name": "test-leaky-summary",
            "schema": NotedData,
            "fingerprint_fields": ("request_id", "version", "secret"),
            "sensitive_fields": ("secret",),
            "summary": template,
        },
    )
    with pytest.raises(ValueError, match=re.escape(refusal)):
        base.register(cls)
    assert "test-leaky-summary" not in base.registry.coded


def configured_action(**fields) -> HttpAction:
    return HttpAction(
        name="create-note",
        destination=Destination(slug="notes", base_url="https://notes.example"),
        schema={
            "type": "object",
            "properties": {"request_id": {"type": "string"}, "customer": {"type": "string"}},
        },
        identity_fields=["request_id"],
        normalisers={"request_id": "identifier"},
        fingerprint_fields=["request_id", "customer"],
        sensitive_fields=["customer"],
        request={"method": "POST", "path": "/notes", "body": {}},
        **fields,
    )


def test_a_configured_action_whose_summary_names_a_sensitive_field_is_refused(db):
    problems = saving.http_action_problems(configured_action(summary="{request_id} for {customer}"))

    assert (
        "summary: the summary names {customer}, a sensitive field: it would show to people it is masked for" in problems
    )


def test_a_configured_action_may_declare_a_summary(db):
    assert not [
        p for p in saving.http_action_problems(configured_action(summary="Note {request_id}")) if "summary" in p
    ]


# --- filters, "select all N matching", every operation ------------------------------------


def keys_in(response) -> set[str]:
    return {op.key for op in response.context["page"].object_list}


def test_the_queue_filters_by_how_it_failed_its_destination_and_its_age(
    client, login, make_operation, workspace, scripted_action
):
    refused = make_operation("needs_review", request_id="R-1", last_error_category="permanent")
    lost = make_operation("unknown", request_id="R-2", last_error_category="ambiguous")
    brief = to_review(submit_brief(workspace), last_error_category="permanent")
    Operation.objects.filter(pk=refused.pk).update(created_at=timezone.now() - timedelta(hours=30))
    login("viewer")

    assert keys_in(client.get("/console/", {"category": "permanent"})) == {refused.key, brief.key}
    assert keys_in(client.get("/console/", {"category": "ambiguous"})) == {lost.key}
    external = scripted_action(external=True)
    called = to_review(submit(workspace, external.name, request_id="R-3"), last_error_category="transient")
    assert keys_in(client.get("/console/", {"destination": external.destination_name()})) == {called.key}
    # An internal action calls no destination: not a choice.
    assert "Select a valid choice" in client.get("/console/", {"destination": "prepare-brief"}).content.decode()
    assert keys_in(client.get("/console/", {"age": "24h"})) == {refused.key}
    assert keys_in(client.get("/console/", {"age": "7d"})) == set()
    # The counts keep the filters.
    assert client.get("/console/", {"category": "permanent"}).context["count"] == 2


def test_an_unknown_filter_value_is_a_form_error_not_a_wider_list(client, login, make_operation):
    make_operation("needs_review")
    login("viewer")

    response = client.get("/console/", {"age": "forever"})

    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()


def test_a_destination_shared_by_actions_lists_them_all(client, login, workspace):
    """file-ticket and send-notice both call the stand-in."""
    ticket = to_review(
        submit_event(
            workspace=workspace,
            source="api",
            raw={"action": "file-ticket", "data": {"request_id": "R-1", "version": 1, "summary": "s", "owner": "ops"}},
        ).operation
    )
    login("viewer")
    destination = get_action("file-ticket").destination_name()

    assert keys_in(client.get("/console/", {"destination": destination})) == {ticket.key}


def many(make_operation, count: int, state: str = "needs_review") -> list[Operation]:
    return [make_operation(state, request_id=f"M-{number}") for number in range(count)]


def bar(response) -> dict:
    return response.context["matching"]


def select_all(client, response, kind: str = "cancel", **changes):
    matching = bar(response)
    data = {
        "kind": kind,
        "reason": "the customer withdrew",
        "token": "select-all-token",
        "all_matching": "on",
        "matching": matching["query"],
        "matching_count": matching["count"],
        "matching_digest": matching["digest"],
    } | changes
    return client.post("/console/bulk/", data)


def test_select_all_matching_acts_on_exactly_the_operations_counted(client, login, make_operation):
    operations = many(make_operation, 55)
    elsewhere = make_operation("unknown", request_id="U-1")
    login("operator")
    listed = client.get("/console/", {"state": "needs_review"})
    assert bar(listed)["count"] == 55
    assert len(listed.context["page"]) == 50
    assert "Select all 55 matching" in listed.content.decode()

    response = select_all(client, listed)

    bulk = BulkAction.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/console/bulk/{bulk.pk}/"
    assert sorted(bulk.operation_ids) == sorted(op.pk for op in operations)
    assert elsewhere.pk not in bulk.operation_ids
    assert bulk.kind == "cancel"
    assert bulk.total == 55


def test_select_all_matching_refuses_a_list_that_changed_since_it_was_seen(client, login, make_operation):
    many(make_operation, 55)
    login("operator")
    listed = client.get("/console/", {"state": "needs_review"})
    make_operation("needs_review", request_id="LATE-1")  # arrived after the page was loaded

    response = client.get(select_all(client, listed)["Location"])

    assert not BulkAction.objects.exists()
    assert "The list changed since you loaded it: you saw 55 operations, it now holds 56." in response.content.decode()


def test_select_all_matching_refuses_the_same_number_of_other_operations(client, login, make_operation):
    operations = many(make_operation, 55)
    login("operator")
    listed = client.get("/console/", {"state": "needs_review"})
    Operation.objects.filter(pk=operations[0].pk).update(state="cancelled")  # one left the list ...
    make_operation("needs_review", request_id="LATE-1")  # ... and another took its place: still 55

    select_all(client, listed)

    assert not BulkAction.objects.exists()


@pytest.mark.parametrize(
    "changes",
    [{"matching_digest": "0" * 64}, {"matching_count": 54}, {"matching_digest": ""}, {"matching_count": "lots"}],
)
def test_select_all_matching_refuses_a_tampered_selection(client, login, make_operation, changes):
    many(make_operation, 55)
    login("operator")

    select_all(client, client.get("/console/", {"state": "needs_review"}), **changes)

    assert not BulkAction.objects.exists()


def test_select_all_matching_sees_only_the_persons_workspaces(client, login, make_operation, django_user_model):
    many(make_operation, 55)
    other = Workspace.objects.create(slug="other")
    theirs = Operation.objects.create(
        workspace=other,
        action="x",
        key="other:x",
        key_recipe=1,
        definition_version="v",
        fingerprint="f",
        payload={},
        state="needs_review",
    )
    login("operator")

    select_all(client, client.get("/console/", {"state": "needs_review"}))

    assert theirs.pk not in BulkAction.objects.get().operation_ids


def test_select_all_is_offered_only_when_the_page_does_not_show_them_all(client, login, make_operation):
    many(make_operation, 3)
    login("operator")

    response = client.get("/console/")

    assert bar(response) is None
    assert "matching" not in response.content.decode().split('id="bulk-selection"', 1)[1].split("</form>", 1)[0]


def test_select_all_is_not_offered_past_what_one_action_takes(client, login, make_operation, monkeypatch):
    monkeypatch.setattr("opsconsole.console.views.MAX_OPERATIONS", 52)
    many(make_operation, 55)
    login("operator")

    response = client.get("/console/", {"state": "needs_review"})

    assert bar(response) is None
    assert "more than 52 match, so narrow the filter" in response.content.decode()


def test_a_viewer_is_offered_no_action_bar(client, login, make_operation):
    many(make_operation, 55)
    login("viewer")

    response = client.get("/console/", {"state": "needs_review"})

    assert response.context["matching"] is None
    assert 'id="bulk-selection"' not in response.content.decode()


def test_all_operations_lists_finished_ones_too_newest_first(client, login, make_operation):
    done = make_operation("succeeded", request_id="S-1")
    cancelled = make_operation("cancelled", request_id="C-1")
    waiting = make_operation("needs_review", request_id="N-1")
    login("viewer")

    response = client.get("/console/operations/")

    assert [op.key for op in response.context["page"]] == [waiting.key, cancelled.key, done.key]
    assert "Succeeded" in response.content.decode()
    assert "Cancelled" in response.content.decode()
    assert keys_in(client.get("/console/operations/", {"state": "succeeded"})) == {done.key}
    assert [op.key for op in client.get("/console/operations/", {"sort": "oldest"}).context["page"]][0] == done.key


def test_all_operations_pages_along_the_ids(client, login, make_operation):
    operations = many(make_operation, 60, state="succeeded")
    login("viewer")

    first = client.get("/console/operations/").context["page"]
    second = client.get("/console/operations/", {"older": str(first.older)}).context["page"]
    back = client.get("/console/operations/", {"newer": str(second.newer)}).context["page"]

    assert [op.pk for op in first] == [op.pk for op in operations[::-1][:50]]
    assert [op.pk for op in second] == [op.pk for op in operations[::-1][50:]]
    assert second.older is None
    assert [op.pk for op in back] == [op.pk for op in first]


def test_all_operations_shows_only_the_persons_workspaces(client, login, make_operation):
    ours = make_operation("succeeded")
    other = Workspace.objects.create(slug="other")
    Operation.objects.create(
        workspace=other,
        action="x",
        key="other:x",
        key_recipe=1,
        definition_version="v",
        fingerprint="f",
        payload={},
        state="succeeded",
    )
    login("viewer")

    assert keys_in(client.get("/console/operations/")) == {ours.key}


def test_all_operations_wants_a_login(client):
    assert client.get("/console/operations/").status_code == 302


# --- taking an operation ----------------------------------------------------------------------


def xmin(operation: Operation) -> int:
    """The row version's transaction id: it changes with every UPDATE (each leaves a dead row)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT xmin::text::bigint FROM ledger_operation WHERE id = %s", [operation.pk])
        return cursor.fetchone()[0]


def audit_kinds(operation: Operation) -> list[tuple[str, str, str]]:
    return list(
        AuditEvent.objects.filter(operation=operation, kind__in=["taken", "taken_over", "released"])
        .order_by("id")
        .values_list("kind", "actor", "message")
    )


def test_an_operator_takes_an_operation_from_its_row_and_others_see_who(client, login, make_operation, person):
    operation = make_operation("needs_review")
    alice = login("operator")

    response = client.post(f"/console/operations/{operation.pk}/take/", {"next": "/console/?state=needs_review"})

    assert response.status_code == 302
    assert response["Location"] == "/console/?state=needs_review"
    operation.refresh_from_db()
    assert operation.assigned_to == alice
    assert operation.assigned_at is not None
    assert audit_kinds(operation) == [("taken", "operator", "taken")]
    assert "you" in rows(client.get("/console/"))[0]
    client.force_login(person("bob", "operator"))
    assert " operator " in f" {rows(client.get('/console/'))[0]} "


def test_assigned_to_me_lists_only_mine(client, login, make_operation, person):
    mine, theirs, nobodys = (make_operation("needs_review", request_id=f"R-{n}") for n in range(3))
    bob = person("bob", "operator")
    me = login("operator")
    Operation.objects.filter(pk=mine.pk).update(assigned_to=me, assigned_at=timezone.now())
    Operation.objects.filter(pk=theirs.pk).update(assigned_to=bob, assigned_at=timezone.now())

    assert keys_in(client.get("/console/", {"assigned": "mine"})) == {mine.key}
    assert keys_in(client.get("/console/", {"assigned": "nobody"})) == {nobodys.key}
    assert keys_in(client.get("/console/", {"assigned": "anyone"})) == {mine.key, theirs.key}
    assert keys_in(client.get("/console/operations/", {"assigned": "mine"})) == {mine.key}


def test_taking_one_someone_else_holds_needs_an_explicit_take_over(client, login, make_operation, person):
    operation = make_operation("needs_review")
    bob = person("bob", "operator")
    Operation.objects.filter(pk=operation.pk).update(assigned_to=bob, assigned_at=timezone.now())
    login("operator")

    refused = client.get(client.post(f"/console/operations/{operation.pk}/take/")["Location"])

    assert "bob has taken this operation; take it over to work on it yourself." in refused.content.decode()
    operation.refresh_from_db()
    assert operation.assigned_to == bob
    assert audit_kinds(operation) == []

    client.post(f"/console/operations/{operation.pk}/take/", {"take_over": "on"})

    operation.refresh_from_db()
    assert operation.assigned_to.username == "operator"
    assert audit_kinds(operation) == [("taken_over", "operator", "taken over from bob")]


def test_taking_one_you_hold_or_giving_back_one_you_do_not_writes_nothing(client, login, make_operation):
    operation = make_operation("needs_review")
    login("operator")
    client.post(f"/console/operations/{operation.pk}/take/")
    before = xmin(operation)

    again = client.get(client.post(f"/console/operations/{operation.pk}/take/")["Location"])
    client.post(f"/console/operations/{operation.pk}/release/")
    after_release = xmin(operation)
    client.post(f"/console/operations/{operation.pk}/release/")

    assert "You had taken" in again.content.decode()
    assert xmin(operation) == after_release != before  # the release wrote; the second take and release did not
    assert [kind for kind, _, _ in audit_kinds(operation)] == ["taken", "released"]


def test_giving_back_leaves_it_to_anyone(client, login, make_operation):
    operation = make_operation("needs_review")
    login("operator")
    client.post(f"/console/operations/{operation.pk}/take/")

    client.post(f"/console/operations/{operation.pk}/release/")

    operation.refresh_from_db()
    assert operation.assigned_to is None
    assert operation.assigned_at is None
    assert audit_kinds(operation)[-1] == ("released", "operator", "given back")


def test_a_viewer_may_not_take(client, login, make_operation):
    operation = make_operation("needs_review")
    login("viewer")

    response = client.get(client.post(f"/console/operations/{operation.pk}/take/")["Location"])

    assert "viewer may not act on operations of workspace demo." in response.content.decode()
    operation.refresh_from_db()
    assert operation.assigned_to is None
    assert audit_kinds(operation) == []


def test_taking_is_a_post_within_the_persons_workspaces(client, login, make_operation):
    operation = make_operation("needs_review")
    other = Workspace.objects.create(slug="other")
    theirs = Operation.objects.create(
        workspace=other,
        action="x",
        key="other:x",
        key_recipe=1,
        definition_version="v",
        fingerprint="f",
        payload={},
        state="needs_review",
    )
    login("operator")

    assert client.get(f"/console/operations/{operation.pk}/take/").status_code == 405
    assert client.post(f"/console/operations/{theirs.pk}/take/").status_code == 404


def test_the_next_link_never_leaves_the_site(client, login, make_operation):
    operation = make_operation("needs_review")
    login("operator")

    response = client.post(f"/console/operations/{operation.pk}/take/", {"next": "https://evil.example/"})

    assert response["Location"] == f"/console/operations/{operation.pk}/"


def test_the_operation_page_offers_take_and_take_over(client, login, make_operation, person):
    operation = make_operation("needs_review")
    login("operator")
    page = client.get(f"/console/operations/{operation.pk}/").content.decode()
    assert "Nobody has taken this operation." in page
    assert ">Take</button>" in page

    Operation.objects.filter(pk=operation.pk).update(assigned_to=person("bob", "operator"), assigned_at=timezone.now())
    page = client.get(f"/console/operations/{operation.pk}/").content.decode()

    assert "Taken by <strong>bob</strong>" in page
    assert "Take over from bob</button>" in page


def test_a_finished_operation_offers_no_take_and_refuses_one(client, login, make_operation):
    operation = make_operation("succeeded")
    login("operator")

    page = client.get(f"/console/operations/{operation.pk}/").content.decode()
    listed = client.get("/console/operations/").content.decode()
    refused = client.get(client.post(f"/console/operations/{operation.pk}/take/")["Location"])

    assert ">Take</button>" not in page
    assert f'aria-label="Take {operation.key}"' not in listed
    assert "This operation has finished (succeeded): nothing is left to take." in refused.content.decode()
    operation.refresh_from_db()
    assert operation.assigned_to is None
    assert audit_kinds(operation) == []


def test_a_finished_operation_with_a_conflict_to_decide_may_be_taken(client, login, workspace):
    operation = submit_brief(workspace)
    Operation.objects.filter(pk=operation.pk).update(state="succeeded")
    data = {"request_id": "R-42", "version": 3, "title": "Review renewal options, EMEA only", "owner": "ops"}
    changed = submit_event(workspace=workspace, source="api", raw={"action": "prepare-brief", "data": data})
    assert changed.outcome == "conflict", changed
    alice = login("operator")

    done = submit_brief(workspace, request_id="R-43")
    Operation.objects.filter(pk=done.pk).update(state="succeeded")
    page = client.get(f"/console/operations/{operation.pk}/").content.decode()
    listed = client.get("/console/operations/").content.decode()
    client.post(f"/console/operations/{operation.pk}/take/")

    assert ">Take</button>" in page
    assert f'aria-label="Take {operation.key}"' in listed
    assert f'aria-label="Take {done.key}"' not in listed
    operation.refresh_from_db()
    assert operation.assigned_to == alice


# --- previous and next within the list --------------------------------------------------------


def neighbours_of(client, operation: Operation, query: str):
    return client.get(f"/console/operations/{operation.pk}/?{query}").context["neighbours"]


def test_the_operation_page_steps_through_the_queue_it_was_opened_from(client, login, make_operation):
    a, b, c = (make_operation("needs_review", request_id=f"R-{n}") for n in range(3))
    login("viewer")
    listed = client.get("/console/").content.decode()
    link = re.search(rf'href="(/console/operations/{b.pk}/\?[^"]+)"', listed).group(1).replace("&amp;", "&")

    around = client.get(link).context["neighbours"]

    # Most recently updated first: c, b, a.
    assert around.previous == f"/console/operations/{c.pk}/?list=queue"
    assert around.next == f"/console/operations/{a.pk}/?list=queue"
    assert around.back == "/console/?list=queue"
    assert neighbours_of(client, c, "list=queue").previous == ""
    assert neighbours_of(client, a, "list=queue").next == ""


def test_the_neighbours_keep_the_lists_filter_and_sort(client, login, make_operation):
    a = make_operation("unknown", request_id="U-1")
    make_operation("needs_review", request_id="N-1")
    c = make_operation("unknown", request_id="U-2")
    login("viewer")

    around = neighbours_of(client, a, "state=unknown&sort=oldest&list=queue")

    assert around.previous == ""
    assert around.next == f"/console/operations/{c.pk}/?state=unknown&sort=oldest&list=queue"


def test_the_neighbours_in_the_list_of_all_operations(client, login, make_operation):
    a, b, c = (make_operation("succeeded", request_id=f"S-{n}") for n in range(3))
    login("viewer")

    around = neighbours_of(client, b, "list=all")

    assert around.previous == f"/console/operations/{c.pk}/?list=all"
    assert around.next == f"/console/operations/{a.pk}/?list=all"


def test_an_operation_that_left_the_list_still_has_its_neighbours(client, login, make_operation):
    a, b, c = (make_operation("needs_review", request_id=f"R-{n}") for n in range(3))
    login("operator")
    Operation.objects.filter(pk=b.pk).update(state="cancelled")  # as a decision would, keeping its time

    around = neighbours_of(client, b, "state=needs_review&list=queue")

    assert around.previous.startswith(f"/console/operations/{c.pk}/")
    assert around.next.startswith(f"/console/operations/{a.pk}/")


def test_without_a_list_there_are_no_neighbours(client, login, make_operation):
    operation = make_operation("needs_review")
    login("viewer")

    assert client.get(f"/console/operations/{operation.pk}/").context["neighbours"] is None
    assert client.get(f"/console/operations/{operation.pk}/?list=elsewhere").context["neighbours"] is None
