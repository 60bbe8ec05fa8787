"""Running bulk actions: replay, cancel or look up many operations with one reason, as a task, each
operation through ``ledger.people.replays`` or ``ledger.people.cancellations`` on its own, or asked
about at its destination (``ledger.engine.lookups``, nothing changed but the audit trail), so each
has its own audit event and each refusal its own reason, with the progress kept per chunk.

Safe to press twice: the form carries a one-time token, unique in the database, so a second
submission of the same form finds the first action. Safe to run twice or to run again after a
crash: an operation that has its outcome (a ``BulkItem``) is not touched again, nor one replayed
since the action was submitted, and every replay or cancel is itself a guarded transition.
"""

import logging
import time
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import Count
from django.utils import timezone

from ledger.core import nudges, roles, sensitive_notes
from ledger.core.transitions import record_audit_event
from ledger.engine.lookups import ask_destination
from ledger.models import BulkAction, BulkItem, Delivery, Operation, Workspace
from ledger.outcomes import Absent, Found
from ledger.people import cancellations, may, replays, review
from ledger.reads.failure_groups import Criterion
from ledger.states import State

logger = logging.getLogger(__name__)

CHUNK = 25
# A task runs chunks for about this long, then enqueues the rest (well within Q_TIMEOUT).
TASK_SECONDS = 15
# One action takes at most this many operations: a larger group is replayed in several actions
# (each shows its own progress), so no action's frozen list of ids grows without bound.
MAX_OPERATIONS = 5_000
DONE_OUTCOMES = (
    BulkItem.Outcome.REPLAYED,
    BulkItem.Outcome.FORCED,
    BulkItem.Outcome.FOUND,
    BulkItem.Outcome.CANCELLED,
    BulkItem.Outcome.ABSENT,
)


class BulkActionError(Exception):
    """The bulk action cannot be submitted as asked; the message says why (nothing was written)."""


class SensitiveBulkReason(sensitive_notes.SensitiveNote, BulkActionError):
    """The reason quotes a sensitive value of one of the operations (``sensitive_notes.refuse_sensitive_note``)."""


def submit_bulk_action(
    *,
    user,
    kind: str,
    reason: str,
    token: str,
    operation_ids: list[int] | None = None,
    criterion: Criterion | None = None,
    accept_duplicate_risk: bool = False,
    accept_config_change: bool = False,
) -> tuple[BulkAction, bool]:
    """Record a bulk ``kind`` (replay, cancel or lookup) of the operations ``operation_ids`` (a person's
    selection, at most ``MAX_OPERATIONS``) or of those of the failure group ``criterion`` as it is
    now (frozen: operations that fail the same way later are not taken in; of a larger group, the
    ``MAX_OPERATIONS`` oldest), and enqueue its task on commit. Returns the
    action and whether it is new: a ``token`` already used returns the action it made.

    The operations must be in workspaces where ``user`` may review (the caller answers 404 and 403
    for a selection; a group is taken within those workspaces only). Audited per workspace as
    ``bulk_submitted``; each operation is audited again when the task acts on it.
    """
    reason, token = reason.strip(), token.strip()
    if kind not in BulkAction.Kind.values:
        raise BulkActionError(f"Unknown bulk action {kind!r}.")
    if not reason:
        raise BulkActionError("Give a reason: it is kept in the audit trail of every operation.")
    if not token:
        raise BulkActionError("The form has expired; reload the page and submit it again.")
    existing = BulkAction.objects.filter(token=token).first()
    if existing is not None:
        return _same_press(existing, user), False
    reviewable = roles.visible(Operation.objects.all(), user, capability=roles.REVIEW)
    if criterion is not None:
        rows = [
            (op.pk, op.workspace_id)
            for op in reviewable.filter(criterion.filter())
            .only("pk", "workspace_id", "state", "action", "last_error_category", "last_error_message")
            .order_by("updated_at", "pk")[:MAX_OPERATIONS]
            if criterion.matches(op)
        ]
    else:
        wanted = list(dict.fromkeys(operation_ids or []))
        if len(wanted) > MAX_OPERATIONS:
            raise BulkActionError(f"Select at most {MAX_OPERATIONS} operations at once.")
        found = dict(reviewable.filter(pk__in=wanted).values_list("pk", "workspace_id"))
        if len(found) != len(wanted):
            raise BulkActionError("Some of the selected operations are not in a workspace where you may review.")
        rows = [(pk, found[pk]) for pk in wanted]
    if not rows:
        raise BulkActionError(
            "No operation was selected; nothing was done."
            if criterion is None
            else "No operation is in this group any more; nothing was done."
        )
    # The reason goes into the audit trail of every operation: none of their sensitive values may be in it.
    sensitive_notes.refuse_sensitive_note(
        reason,
        Operation.objects.filter(pk__in=[pk for pk, _ in rows]).only("key", "action", "payload", "result").iterator(),
        error=SensitiveBulkReason,
    )
    try:
        with transaction.atomic():
            bulk = BulkAction.objects.create(
                kind=kind,
                reason=reason,
                user=user,
                token=token,
                criterion=str(criterion or ""),
                accept_duplicate_risk=accept_duplicate_risk,
                accept_config_change=accept_config_change,
                operation_ids=[pk for pk, _ in rows],
                total=len(rows),
            )
            workspaces = Workspace.objects.in_bulk({workspace_id for _, workspace_id in rows})
            for workspace_id, workspace in sorted(workspaces.items()):
                count = sum(1 for _, w in rows if w == workspace_id)
                record_audit_event(
                    actor=user.get_username(),
                    kind="bulk_submitted",
                    workspace=workspace,
                    message=f"bulk {kind} {bulk.pk} of {count} operation(s): {reason}",
                )
            transaction.on_commit(partial(nudges.enqueue_bulk_action, bulk.pk))
    except IntegrityError:
        # The same form pressed twice at once: the other press made the action.
        existing = BulkAction.objects.filter(token=token).first()
        if existing is None:
            raise
        return _same_press(existing, user), False
    return bulk, True


def _same_press(bulk: BulkAction, user) -> BulkAction:
    if bulk.user_id != user.pk:
        raise BulkActionError("This form was already submitted by someone else; reload the page.")
    return bulk


def run_bulk_action(pk: int, *, chunks: int | None = None, seconds: float | None = None) -> BulkAction:
    """Act on the operations of bulk action ``pk`` that have no outcome yet, ``CHUNK`` at a time,
    for at most ``chunks`` chunks or until ``seconds`` have passed (checked between chunks); then
    write the counts. Finished once every operation has its outcome.

    Each operation: ``replays.replay_operation`` or ``cancellations.cancel_operation`` as the person who
    submitted it, with their reason (and the risks they accepted), then its ``BulkItem``. A
    refusal (no longer needs review, a duplicate risk or a configuration change not accepted, no
    longer the right role ...) is recorded as skipped with its reason. Database errors are not
    caught: the run stops, and running it again continues where it stopped.
    """
    bulk = BulkAction.objects.select_related("user").get(pk=pk)
    if bulk.status == BulkAction.Status.FINISHED:
        return bulk
    if bulk.status == BulkAction.Status.QUEUED:
        BulkAction.objects.filter(pk=pk, status=BulkAction.Status.QUEUED).update(
            status=BulkAction.Status.RUNNING, updated_at=timezone.now()
        )
    had = set(BulkItem.objects.filter(bulk_action_id=pk).values_list("operation_id", flat=True))
    remaining = [operation_id for operation_id in bulk.operation_ids if operation_id not in had]
    started = time.monotonic()
    for number, start in enumerate(range(0, len(remaining), CHUNK)):
        if (chunks is not None and number >= chunks) or (
            seconds is not None and number and time.monotonic() - started > seconds
        ):
            break
        _run_chunk(bulk, remaining[start : start + CHUNK])
        _record_progress(bulk)
    if not remaining:
        _record_progress(bulk)  # a run that stopped after its last outcome, before it finished
    bulk.refresh_from_db()
    return bulk


def redrive_stalled(*, now: datetime) -> int:
    """Enqueue the task of every bulk action left unfinished and untouched for longer than the
    cluster's ``retry`` (past its task timeout, so no task can still be running it): a task that
    crashed (django-q2 does not retry a failed one) or was lost (Redis). Each is touched, so the
    next sweep leaves it alone for as long again. Returns how many were enqueued."""
    quiet = timedelta(seconds=settings.Q_CLUSTER["retry"])
    stalled = list(
        BulkAction.objects.filter(
            status__in=[BulkAction.Status.QUEUED, BulkAction.Status.RUNNING], updated_at__lt=now - quiet
        ).values_list("pk", flat=True)
    )
    for pk in stalled:
        touched = BulkAction.objects.filter(pk=pk, updated_at__lt=now - quiet).update(updated_at=now)
        if touched:
            transaction.on_commit(partial(nudges.enqueue_bulk_action, pk))
    return len(stalled)


def _run_chunk(bulk: BulkAction, chunk: list[int]) -> None:
    operations = Operation.objects.select_related("workspace").in_bulk(chunk)
    # Replayed since the submission, but with no outcome recorded: this run, stopped before it
    # could record it, or the person by hand meanwhile. Either way not again.
    replayed = set(
        Delivery.objects.filter(
            operation_id__in=chunk,
            source=Delivery.Source.REPLAY,
            person_id=bulk.user_id,
            received_at__gte=bulk.created_at,
        ).values_list("operation_id", flat=True)
    )
    for operation_id in chunk:
        outcome: str
        operation = operations.get(operation_id)
        if operation is None:
            outcome, detail = BulkItem.Outcome.SKIPPED, "no longer exists (purged)"
        elif operation_id in replayed:
            outcome, detail = BulkItem.Outcome.SKIPPED, "already replayed since this bulk action was submitted"
        else:
            outcome, detail = _act(bulk, operation)
        # ignore_conflicts: a second run at the same time recorded it first (its outcome stands).
        BulkItem.objects.bulk_create(
            [BulkItem(bulk_action=bulk, operation_id=operation_id, outcome=outcome, detail=detail[:500])],
            ignore_conflicts=True,
        )


def _act(bulk: BulkAction, operation: Operation) -> tuple[str, str]:
    """What ``bulk`` does to ``operation``: its outcome and, for a skip, why. Each operation is a
    transaction of its own (the lock order, docs/architecture.md: one row, then the chain), never
    a chunk's worth at once."""
    reason = f"{bulk.reason} (bulk {bulk.kind} {bulk.pk})"
    try:
        if bulk.kind == BulkAction.Kind.LOOKUP:
            return _look_up(bulk, operation, reason=reason)
        if bulk.kind == BulkAction.Kind.REPLAY:
            if operation.state != State.NEEDS_REVIEW:
                return BulkItem.Outcome.SKIPPED, f"no longer needs review (now {operation.state})"
            done = replays.replay_operation(
                operation,
                user=bulk.user,
                reason=reason,
                accept_duplicate_risk=bulk.accept_duplicate_risk,
                accept_config_change=bulk.accept_config_change,
            )
            return done.verdict, done.lookup
        if may.cancel_refusal(operation):
            return BulkItem.Outcome.SKIPPED, f"cannot be cancelled now (it is {operation.state})"
        cancelled = cancellations.cancel_operation(operation, user=bulk.user, reason=reason)
        return cancelled.verdict, cancelled.lookup
    except replays.DuplicateRisk:
        return BulkItem.Outcome.SKIPPED, (
            "the destination cannot tell whether it already acted, and the duplicate risk was not accepted"
        )
    except replays.ConfigChanged as exc:
        fields = ", ".join(sorted({change.field for change in exc.changes}))
        return BulkItem.Outcome.SKIPPED, f"its configuration changed ({fields}), and the change was not accepted"
    except review.ReviewError as exc:
        return BulkItem.Outcome.SKIPPED, str(exc)
    except DatabaseError:
        raise
    except Exception as exc:  # noqa: BLE001  one operation's unexpected error must not stop the others
        logger.warning(
            "bulk action: an operation failed unexpectedly",
            extra={"bulk_action": bulk.pk, "operation": operation.pk, "error_type": type(exc).__name__},
        )
        return BulkItem.Outcome.FAILED, f"unexpected error: {type(exc).__name__}"


def _look_up(bulk: BulkAction, operation: Operation, *, reason: str) -> tuple[str, str]:
    """Ask the destination about ``operation`` by its key and audit the answer; the operation is
    left as it is, whatever its state (a person decides what follows). The network call runs
    outside any transaction."""
    review.require_review(bulk.user, operation)
    answer = ask_destination(operation, review.action_of(operation))
    if isinstance(answer, Found):
        outcome, detail = BulkItem.Outcome.FOUND, f"the destination has record {answer.external_id}"
    elif isinstance(answer, Absent):
        outcome, detail = BulkItem.Outcome.ABSENT, "the destination has no record of it"
    else:
        outcome, detail = BulkItem.Outcome.SKIPPED, f"the destination could not tell: {answer.reason}"
    record_audit_event(
        actor=bulk.user.get_username(), kind="looked_up", operation=operation, message=f"{detail}: {reason}"
    )
    return outcome, detail


def _record_progress(bulk: BulkAction) -> None:
    """The counts from the outcomes recorded (so a rerun or a second run cannot miscount): one
    read and one UPDATE per chunk, which also finishes the action once every operation has one."""
    counts = dict(BulkItem.objects.filter(bulk_action=bulk).order_by().values_list("outcome").annotate(n=Count("pk")))
    done = sum(counts.get(outcome, 0) for outcome in DONE_OUTCOMES)
    skipped, failed = counts.get(BulkItem.Outcome.SKIPPED, 0), counts.get(BulkItem.Outcome.FAILED, 0)
    now = timezone.now()
    finished = done + skipped + failed >= bulk.total
    BulkAction.objects.filter(pk=bulk.pk).exclude(status=BulkAction.Status.FINISHED).update(
        done=done,
        skipped=skipped,
        failed=failed,
        updated_at=now,
        status=BulkAction.Status.FINISHED if finished else BulkAction.Status.RUNNING,
        finished_at=now if finished else None,
    )
