"""Many conflicts decided at once (ledger.people.conflict_decisions): each decided once and audited on its own, in one
transaction; a conflict already decided is skipped and reported; a refusal writes nothing."""

import threading

import pytest
from django.db import connection

from ledger.core import accounts
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import AuditEvent, Conflict, Membership, Operation
from ledger.people import conflict_decisions, review
from tests.conftest import event

DECISIONS = ["conflict_dismissed", "conflict_applied"]


def race(workspace, count: int, *, request_id="R-42") -> tuple[Operation, list[Conflict]]:
    """The same key sent with ``count`` + 1 different titles through intake: one operation, ``count``
    conflicts (oldest first)."""
    base = {"request_id": request_id, "delivery_id": f"{request_id}-d0"}
    operation = submit_event(workspace=workspace, source="api", raw=_event(**base)).operation
    made = []
    for number in range(1, count + 1):
        result = submit_event(
            workspace=workspace,
            source="api",
            raw=_event(
                request_id=request_id,
                delivery_id=f"{request_id}-d{number}",
                title=f"Review renewal options, take {number}",
            ),
        )
        assert result.outcome == "conflict", result
        made.append(result.conflict)
    return operation, made


def _event(*, request_id, delivery_id, **data):
    return event(delivery_id, request_id=request_id, **data)


def ids(items) -> list[int]:
    return [item.pk for item in items]


def snapshot():
    return (
        list(Operation.objects.order_by("pk").values_list("pk", "state", "payload")),
        list(Conflict.objects.order_by("pk").values_list("pk", "status", "decided_by")),
        AuditEvent.objects.count(),
    )


def test_it_dismisses_every_conflict_of_a_race_each_audited_on_its_own(workspace, alice):
    operation, made = race(workspace, 31)

    done = conflict_decisions.dismiss_conflicts(ids(made), user=alice, reason="the sender retried with drafts")

    assert sorted(ids(done.dismissed)) == ids(made)
    assert done.skipped == []
    assert done.applied is None
    assert set(Conflict.objects.values_list("status", "decided_by")) == {("dismissed", "alice")}
    events = AuditEvent.objects.filter(kind__in=DECISIONS).order_by("id")
    assert [(e.kind, e.actor, e.operation_id, e.message) for e in events] == [
        ("conflict_dismissed", "alice", operation.pk, f"conflict {c.pk} (title): the sender retried with drafts")
        for c in made
    ]
    operation.refresh_from_db()
    assert operation.payload["title"] == "Review renewal options"


def test_it_applies_one_and_dismisses_the_rest_in_one_step(workspace, alice):
    operation, made = race(workspace, 5)
    chosen = made[2]

    done = conflict_decisions.apply_dismissing_the_rest(
        chosen, user=alice, reason="take three is right", rest=ids(made[:2] + made[3:])
    )

    assert done.applied.pk == chosen.pk
    assert sorted(ids(done.dismissed)) == ids(made[:2] + made[3:])
    operation.refresh_from_db()
    assert operation.payload["title"] == "Review renewal options, take 3"
    assert dict(Conflict.objects.values_list("pk", "status")) == {
        c.pk: "applied" if c.pk == chosen.pk else "dismissed" for c in made
    }
    kinds = list(AuditEvent.objects.filter(kind__in=DECISIONS).order_by("id").values_list("kind", "message"))
    assert kinds[0] == ("conflict_applied", f"conflict {chosen.pk} (title): take three is right")
    assert [kind for kind, _ in kinds[1:]] == ["conflict_dismissed"] * 4


def test_it_skips_and_reports_a_conflict_someone_else_decided(workspace, alice, bob):
    _, made = race(workspace, 4)
    conflict_decisions.dismiss_conflict(made[1], user=bob, reason="mine")

    done = conflict_decisions.dismiss_conflicts(ids(made), user=alice, reason="all of them")

    assert ids(done.dismissed) == ids(made[:1] + made[2:])
    assert [(c.pk, c.status, c.decided_by) for c in done.skipped] == [(made[1].pk, "dismissed", "bob")]
    assert Conflict.objects.get(pk=made[1].pk).decided_by == "bob"
    assert AuditEvent.objects.filter(kind="conflict_dismissed").count() == 4  # bob's one, alice's three


def test_pressing_twice_decides_nothing_the_second_time(workspace, alice):
    _, made = race(workspace, 3)
    conflict_decisions.dismiss_conflicts(ids(made), user=alice, reason="once")
    before = snapshot()

    again = conflict_decisions.dismiss_conflicts(ids(made), user=alice, reason="twice")

    assert again.dismissed == []
    assert ids(again.skipped) == ids(made)
    assert snapshot() == before


def test_it_dismisses_the_conflicts_of_operations_in_any_state(workspace, alice):
    succeeded, early = race(workspace, 2, request_id="R-1")
    process_due_operations(worker="w1")
    succeeded.refresh_from_db()
    assert succeeded.state == "succeeded"
    _, late = race(workspace, 2, request_id="R-2")
    Operation.objects.filter(pk=late[0].operation_id).update(state="needs_review")

    done = conflict_decisions.dismiss_conflicts(ids(early + late), user=alice, reason="cleanup")

    assert len(done.dismissed) == 4
    assert not Conflict.objects.filter(status="open").exists()


@pytest.mark.parametrize("role", [None, "viewer", "approver"])
def test_it_refuses_a_person_who_may_not_review(workspace, person, role):
    _, made = race(workspace, 3)
    someone = person("clerk", role)
    before = snapshot()

    with pytest.raises(
        review.ReviewError, match="clerk may not replay, resolve, cancel or decide conflicts in workspace demo."
    ):
        conflict_decisions.dismiss_conflicts(ids(made), user=someone, reason="no")

    assert snapshot() == before


def test_it_refuses_the_whole_selection_when_one_workspace_is_not_the_persons_to_review(workspace, alice):
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    Membership.objects.create(user=alice, workspace=other, role="viewer")
    _, mine = race(workspace, 2)
    _, theirs = race(other, 2)
    before = snapshot()

    with pytest.raises(review.ReviewError, match="alice may not .* in workspace other."):
        conflict_decisions.dismiss_conflicts(ids(mine + theirs), user=alice, reason="both")

    assert snapshot() == before


@pytest.mark.parametrize(
    ("reason", "selection", "refusal"),
    [
        ("  ", "all", "Give a reason: it is kept in the audit trail of every conflict decided. Nothing was changed."),
        ("why", "none", "Select at least one conflict; nothing was changed."),
        ("why", "unknown", "No conflict 999999; nothing was changed."),
    ],
)
def test_it_refuses_a_decision_without_a_reason_or_a_selection(workspace, alice, reason, selection, refusal):
    _, made = race(workspace, 2)
    chosen = {"all": ids(made), "none": [], "unknown": ids(made) + [999999]}[selection]
    before = snapshot()

    with pytest.raises(review.ReviewError) as refused:
        conflict_decisions.dismiss_conflicts(chosen, user=alice, reason=reason)

    assert str(refused.value) == refusal
    assert snapshot() == before


def test_it_dismisses_nothing_when_the_apply_is_refused(workspace, alice):
    operation, made = race(workspace, 3)
    process_due_operations(worker="w1")
    before = snapshot()

    with pytest.raises(review.ReviewError, match="a conflict can only be applied before the operation runs"):
        conflict_decisions.apply_dismissing_the_rest(made[0], user=alice, reason="too late", rest=ids(made[1:]))

    assert snapshot() == before


def test_it_refuses_to_apply_a_conflict_already_decided(workspace, alice, bob):
    _, made = race(workspace, 3)
    stale_copy = Conflict.objects.select_related("operation").get(pk=made[0].pk)
    conflict_decisions.dismiss_conflict(made[0], user=bob, reason="stale")
    before = snapshot()

    with pytest.raises(review.ReviewError) as refused:
        conflict_decisions.apply_dismissing_the_rest(stale_copy, user=alice, reason="apply", rest=ids(made[1:]))

    assert str(refused.value) == f"Conflict {made[0].pk} is already dismissed (by bob); nothing was changed."
    assert snapshot() == before


def test_it_refuses_to_dismiss_another_operations_conflicts_with_an_apply(workspace, alice):
    operation, made = race(workspace, 2, request_id="R-1")
    _, others = race(workspace, 2, request_id="R-2")
    before = snapshot()

    with pytest.raises(review.ReviewError, match=f"Only conflicts of {operation.key} can be dismissed"):
        conflict_decisions.apply_dismissing_the_rest(made[0], user=alice, reason="x", rest=ids(made[1:] + others))

    assert snapshot() == before


def test_open_ids_leave_out_conflicts_that_arrived_after_the_page_was_shown(workspace):
    operation, made = race(workspace, 3)

    assert conflict_decisions.open_ids([operation.pk], seen=made[1].pk) == ids(made[:2])


@pytest.mark.django_db(transaction=True)
def test_two_people_dismissing_the_same_race_at_once_decide_each_conflict_exactly_once(workspace, alice, bob):
    """Two threads (two connections) press "Dismiss all" on the same 31 conflicts together: the
    row locks make the second wait, then skip what the first decided. No conflict is decided or
    audited twice, and nothing fails."""
    _, made = race(workspace, 31)
    start = threading.Barrier(2)
    outcomes, failures = {}, []

    def press(user):
        try:
            start.wait(timeout=10)
            outcomes[user.username] = conflict_decisions.dismiss_conflicts(
                ids(made), user=user, reason=f"{user} says so"
            )
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=press, args=(user,)) for user in (alice, bob)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    by_alice, by_bob = (set(ids(outcomes[name].dismissed)) for name in ("alice", "bob"))
    assert by_alice.isdisjoint(by_bob)
    assert by_alice | by_bob == set(ids(made))
    for name in ("alice", "bob"):
        assert set(ids(outcomes[name].skipped)) == set(ids(made)) - set(ids(outcomes[name].dismissed))
    decided = dict(Conflict.objects.values_list("pk", "decided_by"))
    assert {pk for pk, who in decided.items() if who == "alice"} == by_alice
    events = AuditEvent.objects.filter(kind="conflict_dismissed")
    assert events.count() == 31
    assert sorted(events.values_list("message", flat=True)) == sorted(
        conflict_decisions.conflict_message(c, f"{decided[c.pk]} says so") for c in made
    )
