"""``Operation.attempts`` counts tries that were made: a claim whose lease expired before any try
began gives its count back, so the figure the console and the API show matches the attempt list
(and the action's ``max_attempts`` is spent by tries, not by workers that died holding a claim)."""

import json
import re
from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command

from ledger.models import Attempt, Membership
from ledger.processing import claim_due_operations, process_due_operations
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
    [figure] = re.findall(r"<dt>Attempts</dt><dd>(\d+)</dd>", page)
    listed = page.split("<h2>Attempts</h2>", 1)[1].split("<h2>", 1)[0]
    rows = listed.split("<tbody>", 1)[1].count("<tr>") if "<tbody>" in listed else 0
    return int(figure), rows


def test_a_claim_that_expired_before_its_try_is_not_an_attempt(client, viewer, workspace, frozen):
    """A worker claimed an internal operation and died: nothing happened (its transaction took the
    effect with it), so after the sweep the operation has made no attempt, and after the next
    worker's success exactly one, as its attempt list says."""
    operation = submit_brief(workspace)
    claim_due_operations(limit=10, worker="dead")

    assert sweep_at(frozen, START + LEASE)["leases_expired"] == 1

    operation.refresh_from_db()
    assert (operation.state, operation.attempts) == ("pending", 0)
    assert shown_attempts(client, viewer, operation) == (0, 0)

    process_due_operations(worker="alive")
    operation.refresh_from_db()
    assert (operation.state, operation.attempts, Attempt.objects.filter(operation=operation).count()) == (
        "succeeded", 1, 1)
    assert shown_attempts(client, viewer, operation) == (1, 1)


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
