"""Bulk actions (ledger.people.bulk_actions): many operations replayed or cancelled with one reason, in
chunks, each through review on its own (its own audit event, its own refusal), with the counts
written per chunk; the same form pressed twice is one action, and a run that stopped continues."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger.core import policies
from ledger.engine.processing import process_due_operations
from ledger.models import Attempt, AuditEvent, BulkAction, BulkItem, Operation
from ledger.outcomes import CannotTell, PermanentError
from ledger.people import bulk_actions
from ledger.people.bulk_actions import BulkActionError, run_bulk_action, submit_bulk_action
from ledger.people.replays import replay_operation
from ledger.reads.failure_groups import Criterion, failure_groups, signature
from tests.ledger.conftest import submit


@pytest.fixture
def action(scripted_action):
    return scripted_action()


def failed(workspace, action, count, message="owner {n} does not exist", prefix="R"):
    """``count`` operations that need review the real way: the destination refused each for good."""
    action.destination.answer(*[PermanentError(message.format(n=n)) for n in range(count)])
    operations = [submit(workspace, action.name, request_id=f"{prefix}-{n}") for n in range(count)]
    process_due_operations(worker="w1", limit=count)
    assert set(Operation.objects.filter(pk__in=[o.pk for o in operations]).values_list("state", flat=True)) == {
        "needs_review"
    }
    return operations


def replay(user, operations, token="t-1", **options):
    bulk, created = submit_bulk_action(
        user=user,
        kind="replay",
        reason="owner created",
        token=token,
        operation_ids=[o.pk for o in operations],
        **options,
    )
    assert created
    return bulk


def outcomes(bulk) -> dict[int, tuple[str, str]]:
    return {item.operation_id: (item.outcome, item.detail) for item in BulkItem.objects.filter(bulk_action=bulk)}


def test_it_replays_each_operation_in_chunks_with_an_audit_event_each(
    workspace, action, alice, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(bulk_actions, "CHUNK", 4)
    operations = failed(workspace, action, 10)
    with django_capture_on_commit_callbacks() as enqueued:
        bulk = replay(alice, operations)
    assert len(enqueued) == 1
    assert (bulk.status, bulk.total, bulk.processed) == ("queued", 10, 0)

    bulk = run_bulk_action(bulk.pk, chunks=1)

    assert (bulk.status, bulk.done, bulk.skipped, bulk.failed) == ("running", 4, 0, 0)
    assert Operation.objects.filter(state="pending").count() == 4
    bulk = run_bulk_action(bulk.pk)
    assert (bulk.status, bulk.done, bulk.skipped) == ("finished", 10, 0)
    assert bulk.finished_at is not None
    assert set(Operation.objects.filter(pk__in=bulk.operation_ids).values_list("state", flat=True)) == {"pending"}
    events = AuditEvent.objects.filter(kind="replayed")
    assert sorted(events.values_list("operation_id", flat=True)) == sorted(o.pk for o in operations)
    assert {(e.actor, e.message) for e in events} == {
        ("alice", f"replay: owner created (bulk replay {bulk.pk}) after 1 attempt(s)")
    }
    assert AuditEvent.objects.get(kind="bulk_submitted").message == (
        f"bulk replay {bulk.pk} of 10 operation(s): owner created"
    )


def test_the_progress_is_written_once_per_chunk_not_per_operation(workspace, action, alice, monkeypatch):
    monkeypatch.setattr(bulk_actions, "CHUNK", 5)
    bulk = replay(alice, failed(workspace, action, 10))

    with CaptureQueriesContext(connection) as queries:
        run_bulk_action(bulk.pk)

    updates = [q["sql"] for q in queries.captured_queries if q["sql"].startswith('UPDATE "ledger_bulkaction"')]
    assert len(updates) == 1 + 2  # queued -> running, then one per chunk


def test_it_skips_what_no_longer_needs_review_and_says_why(workspace, action, alice, bob):
    operations = failed(workspace, action, 3)
    bulk = replay(alice, operations)
    operations[1].refresh_from_db()
    replay_operation(operations[1], user=bob, reason="by hand first")

    bulk = run_bulk_action(bulk.pk)

    assert (bulk.status, bulk.done, bulk.skipped) == ("finished", 2, 1)
    assert outcomes(bulk)[operations[1].pk] == ("skipped", "no longer needs review (now pending)")
    assert AuditEvent.objects.filter(kind="replayed", operation=operations[1]).count() == 1


def test_it_skips_a_duplicate_risk_the_person_did_not_accept(workspace, scripted_action, alice):
    risky = scripted_action(external=True, lookup=lambda self, operation: CannotTell("lookup timed out"))
    [operation, other] = failed(workspace, risky, 2)
    # The first try may have reached the destination (its answer was lost): test setup only.
    Attempt.objects.filter(operation=operation).update(outcome="ambiguous")
    bulk = replay(alice, [operation, other])

    bulk = run_bulk_action(bulk.pk)

    assert (bulk.done, bulk.skipped) == (1, 1)
    assert outcomes(bulk)[operation.pk] == (
        "skipped",
        "the destination cannot tell whether it already acted, and the duplicate risk was not accepted",
    )
    operation.refresh_from_db()
    assert operation.state == "needs_review"
    assert AuditEvent.objects.filter(kind="replay_refused", operation=operation).exists()


def test_a_duplicate_risk_accepted_on_the_form_is_a_forced_replay(workspace, scripted_action, alice):
    risky = scripted_action(external=True, lookup=lambda self, operation: CannotTell("lookup timed out"))
    [operation] = failed(workspace, risky, 1)
    Attempt.objects.filter(operation=operation).update(outcome="ambiguous")

    bulk = run_bulk_action(replay(alice, [operation], accept_duplicate_risk=True).pk)

    assert outcomes(bulk)[operation.pk] == ("forced", "the destination cannot tell: lookup timed out")
    assert AuditEvent.objects.get(kind="replay_forced").operation_id == operation.pk


def test_it_skips_a_changed_configuration_unless_accepted(workspace, action, alice):
    operations = failed(workspace, action, 2)
    policies.set_policy(workspace=workspace, action=action.name, actor="test", key_retention=timedelta(days=400))

    refused = run_bulk_action(replay(alice, operations[:1]).pk)
    accepted = run_bulk_action(replay(alice, operations[1:], token="t-2", accept_config_change=True).pk)

    assert outcomes(refused)[operations[0].pk] == (
        "skipped",
        "its configuration changed (policy.key_retention), and the change was not accepted",
    )
    assert outcomes(accepted)[operations[1].pk] == ("replayed", "")


def test_it_cancels_with_the_reason_and_skips_what_cannot_be_cancelled(workspace, action, alice):
    operations = failed(workspace, action, 2)
    Operation.objects.filter(pk=operations[1].pk).update(state="succeeded")  # test setup only
    bulk, _ = submit_bulk_action(
        user=alice, kind="cancel", reason="customer withdrew", token="t-1", operation_ids=[o.pk for o in operations]
    )

    bulk = run_bulk_action(bulk.pk)

    assert (bulk.done, bulk.skipped) == (1, 1)
    assert outcomes(bulk)[operations[1].pk] == ("skipped", "cannot be cancelled now (it is succeeded)")
    assert AuditEvent.objects.get(kind="cancelled").message == f"cancel: customer withdrew (bulk cancel {bulk.pk})"


def test_a_person_who_lost_the_role_meanwhile_is_refused_per_operation(workspace, action, alice):
    operations = failed(workspace, action, 2)
    bulk = replay(alice, operations)
    alice.memberships.update(role="viewer")

    bulk = run_bulk_action(bulk.pk)

    assert (bulk.done, bulk.skipped) == (0, 2)
    assert {detail for _, detail in outcomes(bulk).values()} == {
        "alice may not replay, resolve, cancel or decide conflicts in workspace demo."
    }


def test_pressing_twice_is_one_action(workspace, action, alice, django_capture_on_commit_callbacks):
    operations = failed(workspace, action, 2)
    with django_capture_on_commit_callbacks() as enqueued:
        first, created = submit_bulk_action(
            user=alice, kind="replay", reason="owner created", token="t-1", operation_ids=[o.pk for o in operations]
        )
        second, again = submit_bulk_action(
            user=alice, kind="replay", reason="owner created", token="t-1", operation_ids=[o.pk for o in operations]
        )

    assert (created, again, second.pk) == (True, False, first.pk)
    assert BulkAction.objects.count() == 1
    assert len(enqueued) == 1


def test_someone_else_cannot_reuse_a_token(workspace, action, alice, bob):
    operations = failed(workspace, action, 1)
    replay(alice, operations)

    with pytest.raises(BulkActionError, match="already submitted by someone else"):
        submit_bulk_action(user=bob, kind="replay", reason="x", token="t-1", operation_ids=[operations[0].pk])


def test_a_run_that_stopped_midway_continues_and_replays_nothing_twice(workspace, action, alice, monkeypatch):
    monkeypatch.setattr(bulk_actions, "CHUNK", 3)
    operations = failed(workspace, action, 7)
    bulk = replay(alice, operations)
    act = bulk_actions._act
    calls = []

    def crash_on_the_fifth(bulk, operation):
        calls.append(operation.pk)
        done = act(bulk, operation)
        if len(calls) == 5:
            raise KeyboardInterrupt("the worker died")  # after the replay, before its outcome was recorded
        return done

    monkeypatch.setattr(bulk_actions, "_act", crash_on_the_fifth)
    with pytest.raises(KeyboardInterrupt):
        run_bulk_action(bulk.pk)
    monkeypatch.setattr(bulk_actions, "_act", act)
    stopped = BulkAction.objects.get(pk=bulk.pk)
    assert (stopped.status, stopped.done) == ("running", 3)  # the first chunk's counts were written

    bulk = run_bulk_action(bulk.pk)

    assert (bulk.status, bulk.done, bulk.skipped) == ("finished", 6, 1)
    assert outcomes(bulk)[calls[4]] == ("skipped", "already replayed since this bulk action was submitted")
    replays = list(AuditEvent.objects.filter(kind="replayed").values_list("operation_id", flat=True))
    assert sorted(replays) == sorted(o.pk for o in operations)  # each exactly once


def test_a_finished_action_run_again_does_nothing(workspace, action, alice):
    bulk = run_bulk_action(replay(alice, failed(workspace, action, 2)).pk)
    events = AuditEvent.objects.count()

    again = run_bulk_action(bulk.pk)

    assert (again.status, again.done) == ("finished", 2)
    assert AuditEvent.objects.count() == events


def test_a_group_is_frozen_at_submission_within_the_persons_workspaces(workspace, action, alice, person):
    from ledger.core import accounts

    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    operations = failed(workspace, action, 3)
    failed(other, action, 2, prefix="O")
    [group], capped = failure_groups(Operation.objects.filter(workspace=workspace))
    assert (group.count, str(group.criterion.general), capped) == (3, "owner <n> does not exist", False)

    bulk, _ = submit_bulk_action(
        user=alice, kind="replay", reason="owner created", token="t-1", criterion=group.criterion
    )
    failed(workspace, action, 1, prefix="L")  # fails the same way after the submission

    assert sorted(bulk.operation_ids) == sorted(o.pk for o in operations)
    assert bulk.criterion == f"{action.name}|permanent|owner <n> does not exist"


def test_nothing_is_written_for_bad_input(workspace, action, alice, person):
    operations = failed(workspace, action, 1)
    stranger = person("stranger", "viewer")
    cases = [
        (dict(user=alice, kind="replay", reason=" ", token="t", operation_ids=[operations[0].pk]), "Give a reason"),
        (dict(user=alice, kind="replay", reason="r", token="t", operation_ids=[]), "No operation was selected"),
        (dict(user=alice, kind="explode", reason="r", token="t", operation_ids=[operations[0].pk]), "Unknown bulk"),
        (dict(user=alice, kind="replay", reason="r", token="", operation_ids=[operations[0].pk]), "form has expired"),
        (
            dict(user=stranger, kind="replay", reason="r", token="t", operation_ids=[operations[0].pk]),
            "not in a workspace where you may review",
        ),
        (
            dict(
                user=alice,
                kind="replay",
                reason="r",
                token="t",
                criterion=Criterion(action.name, "permanent", "nothing fails like this"),
            ),
            "No operation is in this group",
        ),
    ]
    for arguments, message in cases:
        with pytest.raises(BulkActionError, match=message):
            submit_bulk_action(**arguments)
    assert not BulkAction.objects.exists()
    assert not AuditEvent.objects.filter(kind="bulk_submitted").exists()


@pytest.mark.parametrize(
    ("message", "general"),
    [
        ("HTTP 400 from 127.0.0.1:8123", "HTTP 400 from <ip>"),
        ("owner 4711 does not exist", "owner <n> does not exist"),
        (
            "record 'abc-1' is missing for 3f2b8c1e-1d2a-4b7e-9a0c-123456789abc",
            "record '<value>' is missing for <uuid>",
        ),
        ('field "amount" must be positive', 'field "<value>" must be positive'),
        ("hash deadbeef00112233 is unknown", "hash <id> is unknown"),
        ("owner does not exist", "owner does not exist"),
        # The destination's own code is kept as it is, and its words after it left out.
        (
            "HTTP 400 from 127.0.0.1:8123 [card_declined]: Card 4242 was declined",
            "HTTP 400 from <ip> [card_declined]: <said>",
        ),
        ("HTTP 400 from 127.0.0.1:8123 [card_declined]", "HTTP 400 from <ip> [card_declined]: <said>"),
        ("HTTP 400 from api.example [E1234]: no", "HTTP 400 from api.example [E1234]: <said>"),
        # Without a code, the words are the group (made general).
        ("HTTP 400 from 10.0.0.1 : owner 12 is unknown", "HTTP 400 from <ip> : owner <n> is unknown"),
        ("HTTP 422 from 10.0.0.1: owner 12 is unknown", "HTTP 422 from <ip>: owner <n> is unknown"),
    ],
)
def test_a_message_is_made_general(message, general):
    assert signature(message) == general


def test_a_group_filter_finds_exactly_its_operations(workspace, action):
    failed(workspace, action, 3)
    failed(workspace, action, 2, message="HTTP 400 from 10.0.0.{n}:80", prefix="H")
    failed(workspace, action, 1, message="HTTP 409 from 10.0.0.1:80", prefix="C")

    groups, _ = failure_groups(Operation.objects.all())

    assert [(g.criterion.general, g.count) for g in groups] == [
        ("owner <n> does not exist", 3),
        ("HTTP 400 from <ip>", 2),
        ("HTTP 409 from <ip>", 1),
    ]
    for group in groups:
        assert Operation.objects.filter(group.criterion.filter()).count() == group.count


def test_groups_split_by_the_destinations_code_and_not_by_its_words(workspace, action):
    failed(workspace, action, 3, message="HTTP 400 from 10.0.0.1 [card_declined]: card {n} declined", prefix="D")
    failed(workspace, action, 1, message="HTTP 400 from 10.0.0.1 [card_declined]", prefix="E")
    failed(workspace, action, 2, message="HTTP 400 from 10.0.0.1 [expired_card]: expired in 20{n}", prefix="X")
    failed(workspace, action, 1, message="HTTP 400 from 10.0.0.1 [card_declinedx]: near miss", prefix="N")

    groups, _ = failure_groups(Operation.objects.all())

    assert [(g.criterion.general, g.count) for g in groups] == [
        ("HTTP 400 from <ip> [card_declined]: <said>", 4),
        ("HTTP 400 from <ip> [expired_card]: <said>", 2),
        ("HTTP 400 from <ip> [card_declinedx]: <said>", 1),
    ]
    for group in groups:  # PostgreSQL's regular expression takes in exactly the group's operations
        assert Operation.objects.filter(group.criterion.filter()).count() == group.count


def test_the_sweep_enqueues_a_bulk_action_whose_task_stopped(
    workspace, action, alice, settings, django_capture_on_commit_callbacks
):
    from django.utils import timezone

    from ledger.sweep import sweep

    bulk = replay(alice, failed(workspace, action, 2))
    quiet = timezone.now() + timedelta(seconds=settings.Q_CLUSTER["retry"] + 1)
    assert sweep(now=timezone.now()).bulk_actions_stalled == 0  # its task may still come

    with django_capture_on_commit_callbacks(execute=False) as enqueued:
        first = sweep(now=quiet)
        second = sweep(now=quiet)

    assert (first.bulk_actions_stalled, second.bulk_actions_stalled) == (1, 0)
    assert [
        callback.args
        for callback in enqueued
        if getattr(callback, "func", None) is bulk_actions.nudges.enqueue_bulk_action
    ] == [(bulk.pk,)]
    run_bulk_action(bulk.pk)
    assert sweep(now=quiet + timedelta(days=1)).bulk_actions_stalled == 0  # finished


def test_a_group_larger_than_one_action_takes_its_oldest(workspace, action, alice, monkeypatch):
    monkeypatch.setattr(bulk_actions, "MAX_OPERATIONS", 3)
    operations = failed(workspace, action, 5)
    [group], _ = failure_groups(Operation.objects.all())

    bulk, _ = submit_bulk_action(user=alice, kind="replay", reason="r", token="t-1", criterion=group.criterion)

    oldest = Operation.objects.filter(pk__in=[o.pk for o in operations]).order_by("updated_at", "pk")[:3]
    assert bulk.operation_ids == [o.pk for o in oldest]
    assert bulk.total == 3
