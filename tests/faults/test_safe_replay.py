"""The issue's story, with a real worker cluster and a real destination that ignores idempotency
keys (``send-notice``): the destination acted and the answer was lost (unknown), the reconciler's
lookup failed (needs review), the operator presses Replay in the console. Whatever the operator
presses, the destination holds exactly one record for the key; only an explicit, audited override
(``replay_forced``) can send it again.
"""

import time

import pytest
from django.utils import timezone
from django_q.models import OrmQ

from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, Operation
from ledger.states import State
from reconciliation.reconcile import reconcile_operation
from tests.conftest import external_event
from tests.faults.qcluster import wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

LOOKUP_503 = {"kind": "status", "status": 503}


@pytest.fixture
def story(workspace, standin, start_cluster, settings, client, reviewer):
    """Steps 1 and 2: acted, answer lost, lookup failed; the operation needs review."""
    settings.OPSCONSOLE_RECONCILE_GIVE_UP_SECONDS = 0  # give up at the first failed lookup, as before
    # The worker runs under this process's configuration (ledger.core.configuration), so that a replay
    # from here finds nothing changed since the operation last ran.
    timeout = str(settings.OPSCONSOLE_HTTP_TIMEOUT_SECONDS)
    cluster = start_cluster(
        "worker", env={"OPSCONSOLE_STANDIN_URL": standin.url, "OPSCONSOLE_HTTP_TIMEOUT_SECONDS": timeout}
    )
    standin.fail_next({"kind": "drop_after_commit"})
    operation = submit_event(workspace=workspace, raw=external_event("send-notice"), source="api").operation
    wait_for(
        lambda: Operation.objects.get(pk=operation.pk).state == State.UNKNOWN,
        timeout=30,
        clusters=(cluster,),
        message="the lost answer did not make the operation unknown",
    )
    operation.refresh_from_db()
    standin.fail_next_lookup(LOOKUP_503)
    assert reconcile_operation(operation, now=operation.next_attempt_at) == "gave_up"
    operation.refresh_from_db()
    assert operation.state == State.NEEDS_REVIEW
    client.force_login(reviewer)
    return operation, cluster, client


def press_replay(client, operation, **extra) -> list[str]:
    """Press Replay on the operation page; returns what the page then tells the person."""
    response = client.post(
        f"/console/operations/{operation.pk}/replay/", {"reason": "customer asks"} | extra, follow=True
    )
    assert response.redirect_chain == [(f"/console/operations/{operation.pk}/", 302)]
    return [message.message for message in response.context["messages"]]


def settle(cluster, seconds: float = 3.0) -> None:
    """Give the cluster time to act on anything a press may have enqueued, then check it is idle
    (a lookup nudge delivered later finds the operation no longer unknown and does nothing)."""
    time.sleep(seconds)
    assert not cluster.exited()
    assert not OrmQ.objects.filter(lock__lte=timezone.now()).exists(), "work is still queued"


def test_replay_finds_the_record_and_sends_nothing(story, standin):
    operation, cluster, client = story

    messages = press_replay(client, operation)
    messages += press_replay(client, operation)  # people click twice

    assert messages[0].startswith("Nothing was sent: the destination has record rec-1.")
    assert "Only an operation that needs review can be replayed" in messages[1]
    settle(cluster)
    operation.refresh_from_db()
    assert (operation.state, operation.external_id) == ("succeeded", "rec-1")
    assert len(standin.records(reference=operation.key)) == 1
    assert standin.requests("POST /records") == 1


def test_replay_is_refused_while_the_destination_cannot_tell(story, standin):
    operation, cluster, client = story
    standin.fail_next_lookup(LOOKUP_503, LOOKUP_503)

    messages = press_replay(client, operation) + press_replay(client, operation)

    assert all(message.startswith("Replay refused: the destination cannot tell") for message in messages)
    settle(cluster)
    assert Operation.objects.get(pk=operation.pk).state == "needs_review"
    assert AuditEvent.objects.filter(kind="replay_refused").count() == 2
    assert len(standin.records(reference=operation.key)) == 1


def test_the_override_is_possible_audited_and_never_the_default(story, standin):
    operation, cluster, client = story
    standin.fail_next_lookup(LOOKUP_503, LOOKUP_503)
    assert press_replay(client, operation)[0].startswith("Replay refused")  # the default refuses

    messages = press_replay(client, operation, accept_duplicate_risk="on")

    assert messages[0].startswith(f"Replayed {operation.key} accepting the duplicate risk")
    wait_for(
        lambda: Operation.objects.get(pk=operation.pk).state == State.SUCCEEDED,
        timeout=30,
        clusters=(cluster,),
        message="the forced replay did not run",
    )
    forced = AuditEvent.objects.get(kind="replay_forced")
    assert (forced.actor, forced.message.split(":")[0]) == ("operator", "replay accepting the duplicate risk")
    # This destination does not deduplicate: the person accepted exactly this.
    assert len(standin.records(reference=operation.key)) == 2
