"""The failure groups page, the queue's selection and the bulk action's progress: a whole group or
a selection replayed or cancelled with one reason, refused with a clear message (and nothing
written) for bad input, 403 without the review role, 404 for another workspace's operations."""

import re

import pytest
from django.contrib.messages import get_messages

from ledger.core import accounts
from ledger.engine.processing import process_due_operations
from ledger.models import AuditEvent, BulkAction, Membership, Operation
from ledger.outcomes import PermanentError
from ledger.people.bulk_actions import run_bulk_action
from tests.ledger.conftest import submit


def messages_of(response) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]


@pytest.fixture
def failed(workspace, action):
    """Operations that need review the real way, their destination having refused each with ``message``."""

    def make(count, message="HTTP 400 from 10.0.0.{n}:443", prefix="R", where=None):
        action.destination.answer(*[PermanentError(message.format(n=n)) for n in range(count)])
        operations = [submit(where or workspace, action.name, request_id=f"{prefix}-{n}") for n in range(count)]
        process_due_operations(worker="w1", limit=count)
        return [Operation.objects.get(pk=operation.pk) for operation in operations]

    return make


def group_of(client):
    """The first group's form on the failures page: its hidden fields as the browser sends them."""
    html = client.get("/console/failures/").content.decode()
    group = re.search(r'name="group" value="([^"]*)"', html).group(1).replace("&lt;", "<").replace("&gt;", ">")
    token = re.search(r'name="token" value="([^"]*)"', html).group(1)
    return {"group": group, "token": token}


def test_the_failures_page_groups_what_failed_the_same_way(client, login, failed, action):
    login("viewer")
    failed(3)
    failed(2, message="owner {n} does not exist", prefix="O")

    response = client.get("/console/failures/")

    groups = response.context["groups"]
    assert [(g.count, g.message) for g in groups] == [(3, "HTTP 400 from <ip>"), (2, "owner <n> does not exist")]
    html = response.content.decode()
    assert "HTTP 400 from &lt;ip&gt;" in html
    assert "Replay all" not in html  # a viewer may look, not act
    assert 'aria-current="page">Failures</a>' in html


def test_a_group_links_to_the_queue_filtered_to_it(client, login, failed):
    login("viewer")
    failed(3)
    other = failed(1, message="owner {n} does not exist", prefix="O")

    [first, _] = client.get("/console/failures/").context["groups"]
    response = client.get(first.queue_url)

    keys = [op.key for op in response.context["page"]]
    assert len(keys) == 3
    assert other[0].key not in keys
    assert "Showing one failure group" in response.content.decode()


def test_replay_all_of_a_group_starts_one_action_and_shows_its_progress(
    client, login, failed, django_capture_on_commit_callbacks
):
    login("operator")
    operations = failed(3)
    form = group_of(client)

    with django_capture_on_commit_callbacks() as enqueued:
        response = client.post("/console/bulk/", form | {"kind": "replay", "reason": "fixed the amount field"})

    bulk = BulkAction.objects.get()
    assert response.url == f"/console/bulk/{bulk.pk}/"
    assert len(enqueued) == 1
    assert messages_of(response) == [("success", "Replaying 3 operations: each is audited on its own.")]
    assert sorted(bulk.operation_ids) == sorted(o.pk for o in operations)
    page = client.get(response.url)
    assert page.context["refresh"] == "every 2s"
    assert 'hx-trigger="every 2s"' in page.content.decode()
    assert '<progress max="3" value="0"' in page.content.decode()

    run_bulk_action(bulk.pk)
    fragment = client.get(response.url, headers={"HX-Request": "true"}).content.decode()

    assert "hx-trigger" not in fragment
    assert "<html" not in fragment  # finished: it stops refreshing
    assert '<progress max="3" value="3"' in fragment
    assert "3/3" in fragment
    assert AuditEvent.objects.filter(kind="replayed", actor="operator").count() == 3


def test_pressing_twice_lands_on_the_same_action(client, login, failed):
    login("operator")
    failed(2)
    form = group_of(client) | {"kind": "replay", "reason": "fixed"}

    first = client.post("/console/bulk/", form)
    second = client.post("/console/bulk/", form)

    assert BulkAction.objects.count() == 1
    assert first.url == second.url
    assert messages_of(second)[-1] == ("info", "This form was already submitted; here is the bulk action it started.")


def test_the_queue_selection_replays_or_cancels_the_ticked_rows(client, login, failed):
    login("operator")
    operations = failed(3)
    page = client.get("/console/").content.decode()
    assert page.count('name="operation"') == 3
    assert "Replay selected" in page

    response = client.post(
        "/console/bulk/",
        {
            "operation": [operations[0].pk, operations[2].pk],
            "kind": "cancel",
            "reason": "customer withdrew",
            "token": "tok-1",
        },
    )

    bulk = BulkAction.objects.get()
    assert (bulk.kind, bulk.operation_ids, bulk.criterion) == ("cancel", [operations[0].pk, operations[2].pk], "")
    run_bulk_action(bulk.pk)
    states = dict(Operation.objects.values_list("pk", "state"))
    assert [states[o.pk] for o in operations] == ["cancelled", "needs_review", "cancelled"]
    assert response.url == f"/console/bulk/{bulk.pk}/"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"kind": "replay", "reason": "fixed", "token": "t"},
            "Operations: Select at least one operation. Nothing was changed.",
        ),
        (
            {"operation": ["1"], "kind": "replay", "reason": "", "token": "t"},
            "Reason is required; nothing was changed.",
        ),
        (
            {"operation": ["x"], "kind": "replay", "reason": "r", "token": "t"},
            "Operations: The selection is not a list of operations. Nothing was changed.",
        ),
        ({"operation": ["1"], "kind": "explode", "reason": "r", "token": "t"}, "Kind: Select a valid choice."),
        (
            {"operation": ["1"], "kind": "replay", "reason": "r"},
            "The form's one-time token (reload the page) is required; nothing was changed.",
        ),
        (
            {"group": "no-separators", "kind": "replay", "reason": "r", "token": "t"},
            "This failure group is not one the console knows; reload the page. Nothing was changed.",
        ),
    ],
)
def test_bad_input_is_refused_with_a_clear_message_and_nothing_written(client, login, failed, data, message):
    login("operator")
    failed(1)

    response = client.post("/console/bulk/", data)

    assert response.status_code == 302
    [(level, said)] = messages_of(response)
    assert level == "error"
    assert said.startswith(message)
    assert not BulkAction.objects.exists()
    assert not AuditEvent.objects.filter(kind="bulk_submitted").exists()


def test_without_the_review_role_it_is_refused(client, login, failed):
    login("viewer")
    operations = failed(1)
    page = client.get("/console/").content.decode()
    assert 'name="operation"' not in page
    assert "Replay selected" not in page

    by_selection = client.post(
        "/console/bulk/", {"operation": [operations[0].pk], "kind": "replay", "reason": "r", "token": "t-1"}
    )
    by_group = client.post(
        "/console/bulk/",
        {"group": f"{operations[0].action}|permanent|x", "kind": "replay", "reason": "r", "token": "t-2"},
    )

    assert (by_selection.status_code, by_group.status_code) == (403, 403)
    assert not BulkAction.objects.exists()


def test_another_workspaces_operations_are_not_found(client, login, failed):
    login("operator")
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    [theirs] = failed(1, prefix="T", where=other)
    [mine] = failed(1)

    response = client.post(
        "/console/bulk/", {"operation": [mine.pk, theirs.pk], "kind": "replay", "reason": "r", "token": "t-1"}
    )

    assert response.status_code == 404
    assert not BulkAction.objects.exists()


def test_a_group_takes_only_the_workspaces_where_the_person_may_review(client, login, failed, workspace):
    user = login("operator")
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    Membership.objects.create(user=user, workspace=other, role="viewer")
    failed(1, prefix="T", where=other)
    [mine] = failed(1, prefix="M")
    groups = client.get("/console/failures/").context["groups"]
    assert groups[0].count == 2  # both are seen

    client.post("/console/bulk/", group_of(client) | {"kind": "replay", "reason": "fixed"})

    assert BulkAction.objects.get().operation_ids == [mine.pk]


def test_someone_elses_bulk_action_is_not_found(client, login, failed, person):
    login("operator")
    failed(1)
    client.post("/console/bulk/", group_of(client) | {"kind": "replay", "reason": "fixed"})
    bulk = BulkAction.objects.get()
    client.force_login(person("colleague", "operator"))

    assert client.get(f"/console/bulk/{bulk.pk}/").status_code == 404


def test_the_progress_page_says_why_operations_were_skipped(client, login, failed, bob):
    from ledger.people.replays import replay_operation

    login("operator")
    operations = failed(3)
    client.post("/console/bulk/", group_of(client) | {"kind": "replay", "reason": "fixed"})
    replay_operation(operations[0], user=bob, reason="by hand")
    bulk = BulkAction.objects.get()

    run_bulk_action(bulk.pk)
    html = client.get(f"/console/bulk/{bulk.pk}/").content.decode()

    assert "<strong>1</strong> skipped: no longer needs review (now pending)" in html
    assert "2 replayed, 1 skipped" in html
    assert len(re.findall(r'href="/console/operations/\d+/', html)) == 3
