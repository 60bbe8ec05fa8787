"""``Operation.attempts`` counts tries that were made, toward the action's limit: an external claim
whose lease expired before its call began gives its count back (no request left, so ``max_attempts``
is not spent); an internal claim was a try (its effect ran and died with the worker's transaction),
so it counts, and an action that kills its worker every time stops at its limit instead of looping
until its deadline. Where the figure and the attempt list differ, the page says why."""

import json
import re
from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command

from ledger.engine.claiming import claim_due_operations
from ledger.engine.processing import process_due_operations
from ledger.models import Attempt, Membership
from tests.ledger.conftest import START, submit, submit_brief

LEASE = timedelta(seconds=settings.OPSCONSOLE_LEASE_SECONDS + 1)


class WorkerDied(BaseException):
    """Stands for SIGKILL in the middle of a destination call: nothing after it runs."""


def sweep_at(frozen, when) -> dict:
    """``manage.py sweep`` at ``when``, as the schedule runs it."""
    frozen.move_to(when)
    out = StringIO()
    call_command("sweep", stdout=out)
    return json.loads(out.getvalue())


@pytest.fixture
def viewer(client, workspace, django_user_model):
    user = django_user_model.objects.create_user("vera", password="pw")
    Membership.objects.create(user=user, workspace=workspace, role="viewer")
    return user


def shown_attempts(client, viewer, operation) -> tuple[int, int]:
    """The figure the operation page shows a viewer, and the rows of its attempt list."""
    client.force_login(viewer)  # now: the test moves the clock, and a session from before may have expired
    page = client.get(f"/console/operations/{operation.pk}/").content.decode()
    [figure] = re.findall(r"<dt>Attempts</dt><dd>(\d+) of \d+", page)
    listed = page.split("<h2>Attempts</h2>", 1)[1].split("<h2>", 1)[0]
    rows = listed.split("<tbody>", 1)[1].count("<tr>") if "<tbody>" in listed else 0
    return int(figure), rows


def test_an_internal_try_whose_worker_died_counts_and_the_page_says_why_it_has_no_row(
    client, viewer, workspace, frozen
):
    """A worker claimed an internal operation and died: its effect died with its transaction, but
    the try was made. The page shows the count toward the limit and why the list is shorter."""
    operation = submit_brief(workspace)
    claim_due_operations(limit=10, worker="dead")

    assert sweep_at(frozen, START + LEASE)["leases_expired"] == 1

    operation.refresh_from_db()
    assert (operation.state, operation.attempts) == ("pending", 1)
    assert shown_attempts(client, viewer, operation) == (1, 0)
    page = client.get(f"/console/operations/{operation.pk}/").content.decode()
    assert "<dd>1 of 5 <span" in page
    assert "0 listed below" in page
    assert "a try whose worker stopped before recording anything leaves no row" in page

    process_due_operations(worker="alive")
    operation.refresh_from_db()
    assert (operation.state, operation.attempts, Attempt.objects.filter(operation=operation).count()) == (
        "succeeded",
        2,
        1,
    )
    assert shown_attempts(client, viewer, operation) == (2, 1)


def test_an_internal_action_that_kills_its_worker_every_time_stops_at_its_limit(workspace, scripted_action, frozen):
    """Claimed, the worker dies, the sweep finds the lease expired, again: at max_attempts the
    operation goes to needs review instead of being claimed until its deadline."""
    action = scripted_action(external=False, max_attempts=3)
    operation = submit(workspace, action.name)
    now = START
    for _ in range(3):
        assert claim_due_operations(limit=10, worker="dead", now=now)
        now += LEASE
        sweep_at(frozen, now)

    operation.refresh_from_db()
    assert (operation.state, operation.attempts) == ("needs_review", 3)
    assert not Attempt.objects.filter(operation=operation).exists()
    assert (operation.last_error_category, operation.last_error_message) == (
        "transient",
        "attempt limit reached (3 of 3): the worker stopped before it recorded an outcome (its lease expired)",
    )
    assert not claim_due_operations(limit=10, worker="next", now=now)


def test_lease_expiries_do_not_spend_the_attempt_limit(workspace, scripted_action, frozen):
    """An external action claimed and abandoned before its call, again and again, still gets every
    one of its max_attempts tries at the destination."""
    action = scripted_action(external=True, max_attempts=2)
    operation = submit(workspace, action.name)
    now = START
    for _ in range(3):
        claim_due_operations(limit=10, worker="dead", now=now)
        now += LEASE
        sweep_at(frozen, now)
    operation.refresh_from_db()
    assert (operation.state, operation.attempts) == ("pending", 0)

    from ledger.outcomes import TransientError

    action.destination.answer(TransientError("busy"))
    process_due_operations(worker="alive")
    operation.refresh_from_db()
    assert (operation.state, operation.attempts) == ("retrying", 1)


def test_a_try_that_began_before_the_lease_expired_is_an_attempt(client, viewer, workspace, scripted_action, frozen):
    """An external try whose request may have left counts: its attempt row stays, abandoned."""
    action = scripted_action(external=True)
    action.destination.answer(WorkerDied())
    operation = submit(workspace, action.name)
    with pytest.raises(WorkerDied):
        process_due_operations(worker="dead")

    sweep_at(frozen, START + LEASE)

    operation.refresh_from_db()
    assert (operation.state, operation.attempts) == ("unknown", 1)
    assert list(Attempt.objects.filter(operation=operation).values_list("outcome", flat=True)) == ["abandoned"]
    assert shown_attempts(client, viewer, operation) == (1, 1)
