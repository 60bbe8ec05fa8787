"""django-q2 tasks: thin, idempotent, carrying ids only. The ledger is the truth; a task is a nudge.

A task may run twice or never (the ORM broker delivers at least once, Redis at most once): running
one twice only finds less to claim, and the sweep re-drives whatever a lost task left behind.
Enqueueing lives in ``ledger.core.nudges``, below the services that nudge.
"""

from time import monotonic

from django.conf import settings

from ledger import sweep as sweeping
from ledger.core import audit_heads, nudges
from ledger.engine import processing
from ledger.people import bulk_actions


def process_operations(operation_id: int | None = None) -> int:
    """Claim and perform batches of due operations, one after another while they come back full,
    for up to ``OPSCONSOLE_PROCESS_SECONDS``; returns how many were claimed in all.

    A full first batch asks for more runs at once (``follow_up``: the other workers join in), and
    so does the last one when the time ran out with batches still full. Going on in the same task
    spares each further batch a round through the queue (its enqueue, dequeue and acknowledgement,
    the wake-up taken again); each batch is still its own claim and commit, so a worker that dies
    between two leaves what one task between two batches left. The time bounds how long other
    tasks wait behind a backlog.

    ``operation_id`` names the operation whose arrival sent the nudge (kept for the task list);
    the claim takes the oldest due operations, that one included when it is still due.
    """
    nudges.begin_processing()  # before the claim: work arriving from now on asks for a task of its own
    ends_at = monotonic() + settings.OPSCONSOLE_PROCESS_SECONDS
    claimed = total = processing.process_due_operations()
    if claimed >= settings.OPSCONSOLE_CLAIM_BATCH:
        nudges.follow_up()
    while claimed >= settings.OPSCONSOLE_CLAIM_BATCH and monotonic() < ends_at:
        claimed = processing.process_due_operations()
        total += claimed
    if claimed >= settings.OPSCONSOLE_CLAIM_BATCH and total > claimed:
        nudges.follow_up()
    return total


def run_bulk_action(bulk_action_id: int) -> str:
    """Run a bulk action for a while (within the cluster's task timeout); a task of its own takes
    the rest. Safe to run twice: what has its outcome is not done again."""
    bulk = bulk_actions.run_bulk_action(bulk_action_id, seconds=bulk_actions.TASK_SECONDS)
    if bulk.status != bulk.Status.FINISHED:
        nudges.enqueue_bulk_action(bulk.pk)
    return bulk.status


def sweep() -> dict:
    return sweeping.sweep().__dict__


def purge() -> dict:
    """The daily retention run (``ledger.retention``), as a schedule."""
    from ledger import retention

    report = retention.purge(actor="schedule")
    return {name: report.total(name) for name in ("redacted", "deleted", "refused_deliveries", "skipped_chunks")}


def reindex() -> str:
    """The weekly rebuild of the purged tables' bloated indexes (``ledger.reindex``), as a schedule,
    within two thirds of the cluster's task timeout: what it leaves, the summary names."""
    from ledger import reindex as reindexing

    return reindexing.reindex(seconds=settings.Q_CLUSTER["timeout"] * 2 / 3).summary()


def export_audit_heads() -> str:
    """The audit chains' heads, to ``OPSCONSOLE_AUDIT_HEADS_TO`` (``ledger.core.audit_heads``). Safe to run
    twice: a second line of the same heads. Without a destination it does nothing (and says so)."""
    if not settings.OPSCONSOLE_AUDIT_HEADS_TO:
        return "not exported: OPSCONSOLE_AUDIT_HEADS_TO is not set"
    return audit_heads.export_heads(settings.OPSCONSOLE_AUDIT_HEADS_TO)
