"""Waking the worker cluster: processing tasks now or at a given time, and reconciliation of one
operation when its next lookup is due.

Services call these from ``transaction.on_commit``; ``request_processing`` is called inside the
transaction that makes work due, and it enqueues on commit too. Tasks are named by dotted path, so
this module imports no task code and sits below everything that nudges (docs/design.md section 7).
"""

import math
from datetime import datetime
from functools import partial

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.tasks import async_task

from ledger.models import Wakeup

PROCESS = "ledger.tasks.process_operations"
RECONCILE = "reconciliation.tasks.reconcile_one"
BULK = "ledger.tasks.run_bulk_action"
WAKEUP = "process"


def request_processing(*, accepted: int) -> None:
    """Make sure a processing task will claim the ``accepted`` operations the current transaction
    reserves, coalescing wake-ups: a stream of events costs a queue row per task that runs, not
    one per event (and so no second commit for the events that find a task pending).

    Called inside the transaction that makes the work due. A pending ``Wakeup`` row means a
    processing task is enqueued and has not begun: it deletes the row first thing, then claims.
    This transaction holds a KEY SHARE lock on that row until it commits, so the task's DELETE
    waits for it and its claim then sees this transaction's work. With no row, this transaction
    inserts one and enqueues the task once it commits (``wake``). The steps are the database's
    ``ledger_take_wakeup`` (``sql/take_wakeup.sql``), which intake's ``ledger_reserve`` calls
    too: one statement here, and the same steps wherever work becomes due.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT ledger_take_wakeup(%s)", [timezone.now()])
        [took_wakeup] = cursor.fetchone()
    wake(accepted=accepted, took_wakeup=took_wakeup)


def wake(*, accepted: int, took_wakeup: bool) -> None:
    """After commit: the task of a wake-up this transaction took, and for a batch larger than a
    claim batch more tasks, up to one per worker, so that every worker helps drain it (a task that
    claims a full batch keeps one queued per worker: ``follow_up``; more would wait in the queue,
    and each costs the request a commit of its own). A crash between the commit and the enqueue
    leaves the wake-up pending without a task: the sweep's tasks take it (and the work) within a
    minute."""
    count = int(took_wakeup) + max(nudges_for(accepted) - 1, 0)
    if count:
        transaction.on_commit(partial(enqueue_drain, count))


def begin_processing() -> None:
    """A processing task begins: the pending wake-up is taken, so work that arrives from now on
    asks for a task of its own. Waits for the transactions that counted on the pending wake-up."""
    Wakeup.objects.filter(name=WAKEUP).delete()


def enqueue_processing(operation_id: int | None = None, *, at: datetime | None = None) -> None:
    """Ask for one processing run, now or once ``at`` has come (a retry's due time)."""
    _enqueue(PROCESS, operation_id, name=f"process-{operation_id or 'next'}", at=at)


def enqueue_lookup(operation_id: int, *, at: datetime) -> None:
    """Ask for the destination to be asked about one unknown operation once ``at`` has come."""
    _enqueue(RECONCILE, operation_id, name=f"reconcile-{operation_id}", at=at)


def enqueue_bulk_action(bulk_action_id: int) -> None:
    """Ask for a bulk action (``ledger.people.bulk_actions``) to be run, or run on from where it stopped."""
    _enqueue(BULK, bulk_action_id, name=f"bulk-{bulk_action_id}", at=None)


def nudges_for(due: int) -> int:
    """Processing tasks to enqueue for ``due`` operations: one per claim batch, at most one per
    worker. A task that claims a full batch keeps a task queued for each worker (``follow_up``), so
    more would only wait in the queue, and a claim that finishes a set takes up to
    ``OPSCONSOLE_FINISH_IN_CLAIM_BATCH``: a resume of 8,000 operations enqueued 160 tasks, ~120 of
    which found nothing, each leaving a dead row in the queue table."""
    return min(math.ceil(due / settings.OPSCONSOLE_CLAIM_BATCH), Conf.WORKERS)


def due_worth_counting() -> int:
    """How far counting a due backlog changes ``nudges_for``: past one claim batch per worker it
    answers one task per worker whatever the count, so a count can stop there (a resume then costs
    the same whatever it held, and its first task leaves sooner)."""
    return settings.OPSCONSOLE_CLAIM_BATCH * Conf.WORKERS


def follow_up() -> None:
    """A task claimed a full batch, so more is probably due: keep a task queued for each of the
    cluster's workers (at least one more), so a backlog that arrived one event at a time, with one
    wake-up for the lot, drains on every worker as a resumed backlog does. A queued task that
    finds nothing costs one empty claim; the queue stays at about one task per worker.
    """
    queued = get_broker().queue_size()
    enqueue_drain(max(1, Conf.WORKERS - queued))


def enqueue_drain(count: int) -> None:
    """Enqueue ``count`` processing tasks (``nudges_for`` the due backlog).

    One nudge is not enough for a backlog (after a resume, say): each worker needs a task to begin
    with, and ``follow_up`` keeps them supplied while batches come back full.
    """
    for _ in range(count):
        enqueue_processing()


class _Later:
    """The part of a broker ``async_task`` uses (``enqueue``, ``list_key``), delivering at ``at``."""

    def __init__(self, broker, at: datetime):
        self.broker, self.at, self.list_key = broker, at, broker.list_key

    def enqueue(self, task: str):
        return self.broker.enqueue_at(task, self.at)


def _enqueue(func: str, *args, name: str, at: datetime | None) -> None:
    broker = None
    if at is not None and at > timezone.now():
        broker = get_broker()
        if not hasattr(broker, "enqueue_at"):
            return  # a broker that cannot wait (another broker_class): the sweep finds it due
        broker = _Later(broker, at)
    async_task(func, *args, task_name=name, broker=broker)
