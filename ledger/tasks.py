"""django-q2 tasks: thin, idempotent, carrying ids only. The ledger is the truth; a task is a nudge.

A task may run twice or never (the ORM broker delivers at least once, Redis at most once): running
one twice only finds less to claim, and the sweep re-drives whatever a lost task left behind.
"""

import math

from django.conf import settings
from django_q.tasks import async_task

from ledger import processing
from ledger import sweep as sweeping

PROCESS = "ledger.tasks.process_operations"
SWEEP = "ledger.tasks.sweep"


def process_operations(operation_id: int | None = None) -> int:
    """Claim and perform one batch of due operations; a full batch asks for another run.

    ``operation_id`` names the operation whose arrival sent the nudge (kept for the task list);
    the claim takes the oldest due operations, that one included when it is still due.
    """
    claimed = processing.process_due_operations()
    if claimed >= settings.OPSCONSOLE_CLAIM_BATCH:
        enqueue_processing()
    return claimed


def sweep() -> dict:
    return sweeping.sweep().__dict__


def enqueue_processing(operation_id: int | None = None) -> None:
    async_task(PROCESS, operation_id, task_name=f"process-{operation_id or 'next'}")


def nudges_for(due: int) -> int:
    """Processing tasks to enqueue for ``due`` operations: one per claim batch, capped."""
    return min(math.ceil(due / settings.OPSCONSOLE_CLAIM_BATCH), settings.OPSCONSOLE_SWEEP_MAX_NUDGES)


def enqueue_drain(count: int | None = None) -> None:
    """Enqueue ``count`` processing tasks; by default one per claim batch of the due backlog.

    One nudge is not enough for a backlog (after a resume, say): the chain of full batches runs
    one task at a time, each waiting for the cluster's next poll (~100 operations/s measured
    against ~600 with a nudge per batch, bench/README.md).
    """
    if count is None:
        count = nudges_for(processing.due_operations().count())
    for _ in range(count):
        enqueue_processing()
