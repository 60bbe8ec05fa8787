"""Waking the worker cluster: processing tasks now or at a given time, and reconciliation of one
operation when its next lookup is due.

Services call these from ``transaction.on_commit``. Tasks are named by dotted path, so this module
imports no task code and sits below everything that nudges (DESIGN.md section 7).
"""

import math
from datetime import datetime

from django.conf import settings
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.tasks import async_task

PROCESS = "ledger.tasks.process_operations"
RECONCILE = "reconciliation.tasks.reconcile_one"


def enqueue_processing(operation_id: int | None = None, *, at: datetime | None = None) -> None:
    """Ask for one processing run, now or once ``at`` has come (a retry's due time)."""
    _enqueue(PROCESS, operation_id, name=f"process-{operation_id or 'next'}", at=at)


def enqueue_lookup(operation_id: int, *, at: datetime) -> None:
    """Ask for the destination to be asked about one unknown operation once ``at`` has come."""
    _enqueue(RECONCILE, operation_id, name=f"reconcile-{operation_id}", at=at)


def nudges_for(due: int) -> int:
    """Processing tasks to enqueue for ``due`` operations: one per claim batch, capped."""
    return min(math.ceil(due / settings.OPSCONSOLE_CLAIM_BATCH), settings.OPSCONSOLE_SWEEP_MAX_NUDGES)


def enqueue_drain(count: int) -> None:
    """Enqueue ``count`` processing tasks (``nudges_for`` the due backlog).

    One nudge is not enough for a backlog (after a resume, say): the chain of full batches runs
    one task at a time, each waiting for the cluster's next poll (~100 operations/s measured
    against ~600 with a nudge per batch, bench/README.md).
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
