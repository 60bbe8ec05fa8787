"""Retries and lookups on time: when a retry or a lookup is scheduled, a task is enqueued for its
due time (django-q2 has no delay of its own; ``ledger.engine.brokers`` adds one to the ORM and Redis
brokers), so an idle cluster acts within seconds of it instead of at the next one-minute sweep."""

import threading
import time
import uuid
from datetime import timedelta

import psycopg
import pytest
import redis
from django.db import OperationalError, connection
from django.test import override_settings
from django.utils import timezone
from django_q.brokers import orm
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from ledger import tasks
from ledger.core import nudges
from ledger.engine.brokers import ORM, Redis
from ledger.engine.processing import process_due_operations
from ledger.models import Operation
from ledger.outcomes import AmbiguousError, TransientError
from tests.faults.qcluster import database_url
from tests.ledger.conftest import START, submit, submit_brief


def test_it_enqueues_a_retry_for_its_due_time(workspace, scripted_action, frozen, django_capture_on_commit_callbacks):
    action = scripted_action()
    action.destination.answer(TransientError("busy", retry_after=40))
    operation = submit(workspace, action.name)
    OrmQ.objects.all().delete()  # intake's own nudge

    with django_capture_on_commit_callbacks(execute=True):
        process_due_operations(worker="w1")

    operation.refresh_from_db()
    assert operation.state == "retrying"
    [task] = OrmQ.objects.all()
    assert task.lock == operation.next_attempt_at >= START + timedelta(seconds=40)
    assert SignedPackage.loads(task.payload)["func"] == nudges.PROCESS


def test_it_enqueues_the_first_lookup_for_when_the_request_has_settled(
    workspace, scripted_action, frozen, django_capture_on_commit_callbacks
):
    action = scripted_action(external=True, settle_after=timedelta(seconds=30))
    action.destination.answer(AmbiguousError("read timeout"))
    operation = submit(workspace, action.name)
    OrmQ.objects.all().delete()

    with django_capture_on_commit_callbacks(execute=True):
        process_due_operations(worker="w1")

    operation.refresh_from_db()
    [task] = OrmQ.objects.all()
    package = SignedPackage.loads(task.payload)
    assert (operation.state, task.lock) == ("unknown", START + timedelta(seconds=30))
    assert (package["func"], package["args"]) == (nudges.RECONCILE, (operation.pk,))


def test_the_orm_broker_hides_a_delayed_task_until_it_is_due(db, time_machine):
    time_machine.move_to(START, tick=False)
    broker = ORM(list_key="test-delayed")
    broker.enqueue_at("the-task", START + timedelta(seconds=5))

    assert broker.dequeue() is None

    time_machine.move_to(START + timedelta(seconds=5, microseconds=1), tick=False)
    [(_, payload)] = broker.dequeue()
    assert payload == "the-task"


@pytest.mark.django_db(transaction=True)
def test_an_idle_orm_broker_takes_a_new_task_when_it_is_enqueued_not_at_its_next_poll(monkeypatch):
    """The pusher waits on LISTEN: an insert into the queue table notifies it (a
    trigger, migration 0028), so it takes the task at once. The poll is made longer than this
    test may last, so only the notification can have woken it."""
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "POLL", 120)
    waiting = ORM(list_key="test-listen")
    taken = []

    def pusher():
        try:
            for _ in range(3):  # the wait that a notification ends, then the take
                found = waiting.dequeue()
                if found:
                    taken.extend(found)
                    return
        finally:
            connection.close()

    thread = threading.Thread(target=pusher, daemon=True)  # a failed run must not wait out the poll
    thread.start()
    deadline = time.monotonic() + 30
    while waiting._listening_on is None and time.monotonic() < deadline:
        time.sleep(0.01)
    ORM(list_key="test-listen").enqueue("the-task")  # another connection: this thread's own
    thread.join(timeout=30)

    assert not thread.is_alive(), "the broker slept its poll instead of waking on the notification"
    assert [payload for _, payload in taken] == ["the-task"]
    assert not OrmQ.objects.filter(key="test-listen", lock__lte=timezone.now()).exists()  # taken: locked


@pytest.mark.django_db(transaction=True)
def test_a_broker_whose_listening_connection_was_lost_listens_again_on_a_new_one(monkeypatch):
    """PostgreSQL ends the pusher's connection while it waits: that dequeue fails as a database
    error of Django's (django-q2's pusher logs it and is restarted), and the next one listens on
    a new connection and takes what was enqueued meanwhile."""
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "POLL", 0.05)
    broker = ORM(list_key="test-relisten")
    assert broker.dequeue() is None
    lost = broker._listening_on
    with psycopg.connect(database_url(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [lost.info.backend_pid])

    with pytest.raises(OperationalError):  # noqa: PT012  dequeue until the termination is seen
        for _ in range(3):  # the first wait may end before the termination arrives
            broker.dequeue()

    ORM(list_key="test-relisten").enqueue("after-the-loss")
    taken = broker.dequeue() or broker.dequeue()
    assert broker._listening_on is not lost
    assert [payload for _, payload in taken] == ["after-the-loss"]


def test_a_broker_inside_a_transaction_polls_as_django_q2s_does(db, monkeypatch):
    """A notification would wait for the transaction's end, so there it sleeps the poll."""
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "POLL", 0.01)
    broker = ORM(list_key="test-in-transaction")

    assert broker.dequeue() is None
    assert broker._listening_on is None


@pytest.mark.django_db(transaction=True)
def test_a_broker_behind_a_transaction_pooler_polls_and_never_listens(monkeypatch, settings):
    """There a LISTEN would stay with a server session the pooler hands to other clients
    (docs/operations.md, "Behind PgBouncer"): the broker takes what is due and sleeps the poll."""
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "POLL", 0.01)
    settings.DATABASE_POOL_MODE = "transaction"
    broker = ORM(list_key="test-pooled")

    assert broker.dequeue() is None
    broker.enqueue("the-task")
    [(_, payload)] = broker.dequeue()

    assert payload == "the-task"
    assert broker._listening_on is None
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_listening_channels()")
        assert cursor.fetchone() == (0,)


def test_a_broker_that_cannot_wait_enqueues_nothing(db, monkeypatch):
    """Another broker_class: the delayed nudge is left to the sweep rather than delivered early."""
    monkeypatch.setattr(nudges, "get_broker", lambda: orm.ORM(list_key="plain"))

    nudges.enqueue_processing(7, at=timezone.now() + timedelta(minutes=1))

    assert not OrmQ.objects.exists()


@pytest.fixture
def redis_broker(settings):
    from django_q.conf import Conf

    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.skip("the Redis broker's delayed delivery needs Redis at 127.0.0.1:6379 (not reachable)")
    original = Conf.REDIS
    Conf.REDIS = "redis://127.0.0.1:6379/0"
    broker = Redis(list_key=f"test-delayed-{uuid.uuid4().hex}")
    yield broker
    broker.delete_queue()
    Conf.REDIS = original


def test_the_redis_broker_delivers_a_delayed_task_once_it_is_due(redis_broker):
    redis_broker.enqueue_at("later", timezone.now() + timedelta(seconds=60))
    redis_broker.enqueue_at("due", timezone.now() - timedelta(seconds=1))

    [(_, first)] = redis_broker.dequeue()

    assert first == b"due"
    assert redis_broker.connection.zcard(redis_broker.delayed_key) == 1  # "later" still waits
    assert redis_broker.dequeue() is None


def test_two_redis_clusters_never_both_deliver_a_delayed_task(redis_broker):
    other = Redis(list_key=redis_broker.list_key.removeprefix("django_q:").removesuffix(":q"))
    assert other.list_key == redis_broker.list_key
    redis_broker.enqueue_at("once", timezone.now() - timedelta(seconds=1))

    delivered = [redis_broker.dequeue(), other.dequeue()]

    assert [item for item in delivered if item] == [[(None, b"once")]]


def test_it_checks_the_operation_when_a_delayed_task_arrives(workspace, scripted_action, frozen, sync_queue):
    """A task delivered for a due time only finds work that is due: running it early does nothing."""
    action = scripted_action()
    action.destination.answer(TransientError("busy", retry_after=40))
    operation = submit(workspace, action.name)
    process_due_operations(worker="w1")

    nudges.enqueue_processing(operation.pk)  # as if delivered now, 40 s early

    operation.refresh_from_db()
    assert (operation.state, len(action.destination.calls)) == ("retrying", 1)
    assert Operation.objects.get().attempts == 1


# One batch per task (no time to go on): each full batch asks for the next run.
@override_settings(OPSCONSOLE_CLAIM_BATCH=2, OPSCONSOLE_FINISH_IN_CLAIM_BATCH=2, OPSCONSOLE_PROCESS_SECONDS=0)
def test_a_full_batch_keeps_a_task_queued_for_every_worker(workspace, frozen):
    """A backlog that arrived one event at a time has one wake-up for the lot; a task that claims a
    full batch tops the queue up to one task per worker (Q_WORKERS 2), so every worker drains it."""
    for n in range(7):
        submit_brief(workspace, request_id=f"R-{n}")
    OrmQ.objects.all().delete()  # the one coalesced wake-up, taken by the task below

    assert tasks.process_operations() == 2
    assert [SignedPackage.loads(task.payload)["func"] for task in OrmQ.objects.all()] == [nudges.PROCESS] * 2

    OrmQ.objects.order_by("id").first().delete()  # a worker takes one of the two and runs it
    assert tasks.process_operations() == 2
    assert OrmQ.objects.count() == 2  # topped up by one, not doubled

    OrmQ.objects.all().delete()
    assert tasks.process_operations() == 2
    assert tasks.process_operations() == 1  # the last one: not a full batch, nothing more asked
    assert OrmQ.objects.count() == 2


@override_settings(OPSCONSOLE_CLAIM_BATCH=2, OPSCONSOLE_FINISH_IN_CLAIM_BATCH=2, OPSCONSOLE_PROCESS_SECONDS=60)
def test_a_task_goes_on_claiming_while_batches_come_back_full(workspace, frozen):
    """Within its time a task claims batch after batch, without a round through the queue for each:
    seven operations are four claims of one task (2, 2, 2, 1); the first full batch still asks for
    a task per worker, so the others join in."""
    for n in range(7):
        submit_brief(workspace, request_id=f"L-{n}")
    OrmQ.objects.all().delete()

    assert tasks.process_operations() == 7
    assert set(Operation.objects.values_list("state", flat=True)) == {"succeeded"}
    assert [SignedPackage.loads(task.payload)["func"] for task in OrmQ.objects.all()] == [nudges.PROCESS] * 2


@override_settings(OPSCONSOLE_CLAIM_BATCH=2, OPSCONSOLE_FINISH_IN_CLAIM_BATCH=2, OPSCONSOLE_PROCESS_SECONDS=1)
def test_a_task_whose_time_ran_out_on_a_full_batch_hands_the_rest_on(workspace, frozen, monkeypatch):
    """Out of time after its second full batch, the task stops and asks for one more run (on top
    of the two its first full batch asked for); the rest waits for that run."""
    for n in range(7):
        submit_brief(workspace, request_id=f"T-{n}")
    OrmQ.objects.all().delete()
    clock = iter([0.0, 0.5, 1.5])  # the start, after the first batch, after the second
    monkeypatch.setattr(tasks, "monotonic", lambda: next(clock))

    assert tasks.process_operations() == 4
    assert Operation.objects.filter(state="succeeded").count() == 4
    assert OrmQ.objects.count() == 3


@override_settings(OPSCONSOLE_CLAIM_BATCH=2, OPSCONSOLE_FINISH_IN_CLAIM_BATCH=2, OPSCONSOLE_PROCESS_SECONDS=0)
def test_a_large_batch_asks_for_a_task_per_worker_not_per_claim_batch(
    workspace, api, django_capture_on_commit_callbacks
):
    """Ten events in one request are five claim batches; the request asks for one task per worker
    (Q_WORKERS 2: its wake-up and one more), not five. Each task that finds a full batch tops the
    queue up to one per worker, so the ten are all performed with at most two tasks queued."""
    from django_q.conf import Conf

    from ledger.models import ReviewDraft
    from tests.conftest import event

    OrmQ.objects.all().delete()
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(
            "/api/v1/events/batch", {"events": [event(f"b-{n}", request_id=f"B-{n}") for n in range(10)]}
        )

    assert response.status_code == 200
    assert OrmQ.objects.count() == Conf.WORKERS == 2
    most_queued = 0
    while OrmQ.objects.exists():
        OrmQ.objects.order_by("id").first().delete()  # a worker takes the oldest task and runs it
        tasks.process_operations()
        most_queued = max(most_queued, OrmQ.objects.count())
    assert most_queued <= Conf.WORKERS
    assert set(Operation.objects.values_list("state", flat=True)) == {"succeeded"}
    assert ReviewDraft.objects.count() == 10


@override_settings(OPSCONSOLE_CLAIM_BATCH=2, OPSCONSOLE_FINISH_IN_CLAIM_BATCH=2, OPSCONSOLE_PROCESS_SECONDS=0)
def test_a_resumed_backlog_gets_a_task_per_worker_not_per_claim_batch(workspace, django_capture_on_commit_callbacks):
    """Ten held operations are five claim batches; the resume enqueues one task per worker (2), and
    the full batches keep the workers supplied: every operation is done by seven tasks (the five
    full batches, then one per worker that finds the end), with never more than two queued; before,
    the resume enqueued five at once and each full batch added one more."""
    from ledger.people.pause import set_paused

    set_paused(paused=True, actor="alice", reason="deploy")
    for n in range(10):
        submit_brief(workspace, request_id=f"H-{n}")
    OrmQ.objects.all().delete()

    with django_capture_on_commit_callbacks(execute=True):
        set_paused(paused=False, actor="bob")

    assert OrmQ.objects.count() == 2
    ran = 0
    while OrmQ.objects.exists():
        OrmQ.objects.order_by("id").first().delete()  # a worker takes the oldest task and runs it
        tasks.process_operations()
        ran += 1
        assert OrmQ.objects.count() <= 2
    assert set(Operation.objects.values_list("state", flat=True)) == {"succeeded"}
    assert ran == 7  # the five batches, then one empty claim per worker


def test_a_wake_up_is_taken_once_and_then_kept_pending(db, django_capture_on_commit_callbacks):
    """``request_processing`` takes the wake-up the database's ``ledger_take_wakeup`` hands out: the
    first caller inserts it and enqueues a task after its commit; one that finds it pending enqueues
    nothing, since the pending task will claim its work too."""
    from ledger.models import Wakeup

    OrmQ.objects.all().delete()
    with django_capture_on_commit_callbacks(execute=True) as first:
        nudges.request_processing(accepted=1)
    with django_capture_on_commit_callbacks(execute=True) as second:
        nudges.request_processing(accepted=1)

    assert Wakeup.objects.filter(name=nudges.WAKEUP).count() == 1
    assert (len(first), len(second)) == (1, 0)
    assert OrmQ.objects.count() == 1


def test_a_task_that_began_lets_the_next_request_take_a_new_wake_up(db, django_capture_on_commit_callbacks):
    nudges.request_processing(accepted=1)
    nudges.begin_processing()  # the task deletes the wake-up first thing

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        nudges.request_processing(accepted=1)

    assert len(callbacks) == 1
