"""The admin's attempts filtered by outcome: the attempts of that outcome, newest first, in the
person's workspaces only, and none where no attempt has it. Each reads a range of
``attempt_outcome_idx`` (outcome, id; migration 0067) for its page and its bounded count: through
the index on the id alone it had, an outcome no attempt has read every attempt that was not ok
(docs/performance.md)."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger.core import accounts
from ledger.models import Attempt, Membership
from tests.ledger.conftest import submit_brief
from tests.plans import only_index

INDEX = "attempt_outcome_idx"
LIST = "/admin/ledger/attempt/"


@pytest.fixture
def tried(workspace):
    """An attempt of each outcome on its own operation of "demo", oldest first, then a permanent
    one in another workspace (test setup only)."""
    now = timezone.now()
    outcomes = ["ok", "transient", "permanent", "", "transient", "ambiguous", "stale"]
    operations = [submit_brief(workspace, request_id=f"R-{n}") for n in range(len(outcomes))]
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    theirs = submit_brief(other, request_id="B-1")
    return Attempt.objects.bulk_create(
        [
            Attempt(operation=op, number=1, fencing_token=1, started_at=now, outcome=outcome)
            for op, outcome in [*zip(operations, outcomes, strict=True), (theirs, "permanent")]
        ]
    )


def listed(response) -> list[int]:
    """The attempts a changelist shows, by the links to them, in order."""
    return [int(pk) for pk in re.findall(r'href="/admin/ledger/attempt/(\d+)/change/', response.content.decode())]


def test_it_lists_one_outcomes_attempts_newest_first(admin_client, tried):
    by_outcome = {
        outcome: [a.pk for a in reversed(tried) if a.outcome == outcome] for outcome in ("transient", "permanent")
    }

    for outcome, attempts in by_outcome.items():
        response = admin_client.get(LIST, {"outcome__exact": outcome})

        assert response.status_code == 200
        assert listed(response) == attempts, outcome
    assert len(by_outcome["transient"]) == 2
    assert len(by_outcome["permanent"]) == 2  # one of "demo", one of "other": a superuser sees both


def test_an_outcome_no_attempt_has_lists_none(admin_client, tried):
    response = admin_client.get(LIST, {"outcome__exact": "abandoned"})

    assert response.status_code == 200
    assert listed(response) == []
    assert "0 attempts" in response.content.decode()


def test_ok_and_running_attempts_are_still_listed_by_their_outcome(admin_client, tried):
    """Not in the index (nearly every attempt): the filter reads them along the primary key."""
    assert listed(admin_client.get(LIST, {"outcome__exact": "ok"})) == [tried[0].pk]
    assert listed(admin_client.get(LIST, {"outcome__exact": ""})) == [tried[3].pk]


def test_a_member_sees_the_outcomes_attempts_of_their_workspaces_only(client, tried, workspace, django_user_model):
    member = django_user_model.objects.create_user("member", password="pw", is_staff=True)
    Membership.objects.create(user=member, workspace=workspace, role="viewer")
    client.force_login(member)

    response = client.get(LIST, {"outcome__exact": "permanent"})

    assert listed(response) == [tried[2].pk]


@pytest.mark.parametrize("outcome", ["abandoned", "transient"])
def test_the_filters_page_and_count_read_one_range_of_the_index(admin_client, tried, outcome):
    only_index("ledger_attempt", INDEX)
    with CaptureQueriesContext(connection) as captured:
        assert admin_client.get(LIST, {"outcome__exact": outcome}).status_code == 200
    reads = [query["sql"] for query in captured if 'FROM "ledger_attempt"' in query["sql"]]

    assert len(reads) == 2  # the bounded count and the page
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a table this small is read whole otherwise
        for sql in reads:
            cursor.execute("EXPLAIN " + sql)
            plan = "\n".join(row[0] for row in cursor.fetchall())

            assert INDEX in plan, plan
            assert re.search(rf"Index Cond: \(\(?outcome\)?(::text)? = '{outcome}'::text\)", plan), plan
